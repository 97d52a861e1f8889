"""The operator's own pod cache and watch (disttrain/operator/informer.py).

`PodCache` is pure: which jobs a watch event or a fresh list changes. `PodWatch` runs on
a fake clock against a scripted stand-in for the API's list and watch (the real API
server serves every cluster test: tests/cluster/reconcile); it proves the order of calls
(list, then watches resumed from the last resourceVersion, a list again on 410) and the
back-off of a refused watch, which the real server cannot be made to do on cue.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from disttrain.api.names import JOB_LABEL
from disttrain.operator.controller import Controller
from disttrain.operator.informer import CLUSTER, PodCache, PodWatch, summaries
from disttrain.operator.kube import ApiError, Expired
from disttrain.operator.metrics import OperatorMetrics
from disttrain.operator.core.state import Policy
from disttrain.operator.settings import Settings

from .fake_clock import FakeClock, settle
from .fake_kube import FakeKube
from .helpers import job as job_doc


def pod(name: str, job: str | None = "demo", namespace: str = "team-a", phase: str = "Running",
        version: str = "1", node: str = "n1") -> dict[str, Any]:
    labels = {JOB_LABEL: job} if job else {}
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels, "resourceVersion": version,
                         "uid": f"uid-{name}"},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


# ---- the cache (pure) -----------------------------------------------------------------

def test_an_added_pod_changes_its_job_and_is_found_by_it():
    cache = PodCache()
    assert cache.apply("ADDED", pod("demo-worker-0")) == {("team-a", "demo")}
    assert [p.name for p in cache[("team-a", "demo")]] == ["demo-worker-0"]
    assert cache.get(("team-a", "other"), []) == [] and len(cache) == 1


def test_an_event_that_changes_nothing_the_operator_reads_queues_nothing():
    cache = PodCache()
    cache.apply("ADDED", pod("demo-worker-0", version="1"))
    assert cache.apply("MODIFIED", pod("demo-worker-0", version="2")) == set()  # a new resourceVersion only
    assert cache.apply("MODIFIED", pod("demo-worker-0", phase="Failed")) == {("team-a", "demo")}
    assert cache[("team-a", "demo")][0].phase == "Failed"


def test_a_deleted_or_unlabelled_pod_leaves_its_job_and_an_empty_job_is_forgotten():
    cache = PodCache()
    cache.apply("ADDED", pod("demo-worker-0"))
    cache.apply("ADDED", pod("demo-worker-1"))
    assert cache.apply("DELETED", pod("demo-worker-0")) == {("team-a", "demo")}
    assert [p.name for p in cache[("team-a", "demo")]] == ["demo-worker-1"]
    assert cache.apply("MODIFIED", pod("demo-worker-1", job=None)) == {("team-a", "demo")}
    assert ("team-a", "demo") not in cache and len(cache) == 0
    assert cache.apply("DELETED", pod("demo-worker-1")) == set()  # already gone: nothing to do


def test_a_pod_relabelled_to_another_job_moves_and_both_jobs_change():
    cache = PodCache()
    cache.apply("ADDED", pod("w-0", job="a"))
    assert cache.apply("MODIFIED", pod("w-0", job="b")) == {("team-a", "a"), ("team-a", "b")}
    assert ("team-a", "a") not in cache and [p.name for p in cache[("team-a", "b")]] == ["w-0"]
    assert cache.apply("DELETED", pod("w-0", job="b")) == {("team-a", "b")} and len(cache) == 0


def test_a_namespaces_fresh_list_replaces_only_that_namespace_and_names_the_jobs_that_differ():
    cache = PodCache()
    for p in (pod("a-0", job="a"), pod("b-0", job="b"), pod("c-0", job="c", namespace="team-b")):
        cache.apply("ADDED", p)
    # team-a relisted: a unchanged, b's pod gone (deleted while the watch was down), d new
    listed = [pod("a-0", job="a", version="9"), pod("d-0", job="d"), pod("x", job=None)]
    assert cache.replace("team-a", summaries(listed)) == {("team-a", "b"), ("team-a", "d")}
    assert sorted(cache) == [("team-a", "a"), ("team-a", "d"), ("team-b", "c")]
    # the whole cluster relisted: team-b's job is gone too, and later events find nothing stale
    assert cache.replace(CLUSTER, summaries([pod("a-0", job="a")])) == {("team-a", "d"), ("team-b", "c")}
    assert sorted(cache) == [("team-a", "a")]
    assert cache.apply("DELETED", pod("c-0", job="c", namespace="team-b")) == set()


# ---- the watch (shell, fake clock) -------------------------------------------------------

class ScriptedApi:
    """list_pods and watch_pods as Kube has them, answering from a script: each list or
    watch call takes the next answer (a page dict, a list of events, or an exception)."""

    def __init__(self, answers: list[Any]):
        self.answers, self.calls = list(answers), []
        self.idle = asyncio.Event()

    def _next(self) -> Any:
        if not self.answers:
            self.idle.set()
            return asyncio.get_running_loop().create_future()  # never answers: the script is done
        return self.answers.pop(0)

    async def list_pods(self, namespace: str | None, params: dict[str, str]) -> dict[str, Any]:
        self.calls.append(("list", namespace, dict(params)))
        answer = self._next()
        if isinstance(answer, asyncio.Future):
            return await answer
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def watch_pods(self, namespace: str | None, params: dict[str, str]):
        self.calls.append(("watch", namespace, dict(params)))
        answer = self._next()
        if isinstance(answer, asyncio.Future):
            await answer
        if isinstance(answer, Exception):
            raise answer
        for event in answer:
            yield event


def page(*pods: dict, version: str = "10", more: str = "") -> dict[str, Any]:
    return {"items": list(pods), "metadata": {"resourceVersion": version, **({"continue": more} if more else {})}}


def watching(api: ScriptedApi, cluster_wide: bool = False, clock: FakeClock | None = None):
    changed, synced = [], []
    watch = PodWatch(api, on_change=changed.append, on_synced=synced.append,  # type: ignore[arg-type]
                     cluster_wide=cluster_wide, clock=clock or FakeClock())
    return watch, changed, synced


def test_a_namespace_is_listed_page_by_page_then_watched_from_the_lists_version_and_resumed_where_it_ended():
    async def scenario():
        api = ScriptedApi([page(pod("demo-worker-0"), more="next"), page(pod("demo-worker-1"), version="12"),
                           [("MODIFIED", pod("demo-worker-0", phase="Failed", version="13"))],
                           [("BOOKMARK", {"metadata": {"resourceVersion": "20"}})]])
        watch, changed, synced = watching(api)
        watch.want("team-a")
        watch.want("team-a")  # a second job in the namespace: still one watch
        assert not watch.synced("team-a")
        await asyncio.wait_for(api.idle.wait(), 5)
        assert [(verb, params.get("continue"), params.get("resourceVersion")) for verb, _ns, params in api.calls] == [
            ("list", None, None), ("list", "next", None), ("watch", None, "12"), ("watch", None, "13"),
            ("watch", None, "20")]
        assert all(ns == "team-a" and params["labelSelector"] == JOB_LABEL for _v, ns, params in api.calls)
        assert synced == ["team-a"] and watch.synced("team-a") and not watch.synced("team-b")
        assert changed == [("team-a", "demo"), ("team-a", "demo")]  # the list, then the failure
        assert [p.phase for p in watch.cache[("team-a", "demo")]] == ["Failed", "Running"]
        await watch.close()
    asyncio.run(scenario())


def test_an_expired_watch_lists_again_at_once_and_a_refused_one_backs_off_1_2_4_seconds_then_resets():
    async def scenario():
        clock = FakeClock()
        forbidden = ApiError(403, "Forbidden", 'pods is forbidden: User "system:serviceaccount:x:y"', "watching")
        api = ScriptedApi([page(pod("demo-worker-0")), Expired("410 Gone"), page(version="30"),
                           forbidden, forbidden, forbidden, [("ADDED", pod("demo-worker-1", version="31"))],
                           forbidden])
        watch, changed, synced = watching(api, cluster_wide=True, clock=clock)
        watch.start()
        await settle()
        # listed, expired, listed again (the pod was deleted meanwhile): no wait in between
        assert [v for v, *_ in api.calls] == ["list", "watch", "list", "watch"]
        assert api.calls[0][1] is CLUSTER and synced == [CLUSTER] and watch.synced("any-namespace")
        assert changed == [("team-a", "demo"), ("team-a", "demo")] and len(watch.cache) == 0
        for wait in (1, 2, 4):  # each refusal waits twice as long as the one before
            await clock.advance(wait - 0.01)
            assert len(api.calls) == 3 + [1, 2, 4].index(wait) + 1
            await clock.advance(0.01)
        # resumed where it was, not listed again; its event in; the next watch goes on from it
        assert [(v, params["resourceVersion"]) for v, _ns, params in api.calls[6:]] == [("watch", "30"),
                                                                                         ("watch", "31")]
        assert changed[-1] == ("team-a", "demo") and len(watch.cache) == 1
        await clock.advance(0.99)  # a watch that delivered events reset the back-off: 1 s again
        assert len(api.calls) == 8
        await clock.advance(0.01)
        assert len(api.calls) == 9 and synced == [CLUSTER]
        await watch.close()
    asyncio.run(scenario())


def test_a_job_waits_for_its_namespaces_pods_to_be_listed_and_goes_the_moment_they_are():
    async def scenario():
        clock = FakeClock()
        kube = FakeKube({("team-a", "demo"): "u1"})
        shell = Controller(settings=Settings(), kube=kube, metrics=OperatorMetrics(),
                           policy=Policy(backoff_base_seconds=1, backoff_max_seconds=4), clock=clock)
        api = ScriptedApi([page(pod("demo-worker-0"), pod("demo-worker-1"))])
        list_answer = api.answers.pop(0)
        gate = asyncio.get_running_loop().create_future()
        api.answers.insert(0, gate)  # the list is slow to answer
        watch = PodWatch(api, on_change=shell.pod_event, on_synced=shell.pods_synced,  # type: ignore[arg-type]
                         cluster_wide=False, clock=clock)
        shell.pods_index, shell.pod_watch = watch.cache, watch
        key = ("team-a", "demo")
        doc = job_doc(nodes=2, trainer={"builtin": {"steps": 10}})
        doc["metadata"].update(uid="u1", generation=1, creationTimestamp="2026-11-24T12:00:00Z")
        shell.job_event(key, doc, "ADDED")
        assert await shell.queue.get() == key
        assert await shell.reconcile(key) is None
        shell.queue.done(key)
        assert kube.calls == [] and not shell.queue.pending(key)  # nothing done while its pods are unknown
        gate.set_result(list_answer)
        await settle()
        assert watch.synced("team-a") and shell.queue.pending(key)
        await shell.reconcile(key)
        assert kube.calls  # and now it acts
        await watch.close()
    asyncio.run(scenario())


def test_a_watch_body_is_cut_into_events_at_newlines_whatever_the_chunks_and_however_long_a_line():
    """aiohttp's readline() refuses a line above its buffer (128 KiB); a pod can be bigger."""
    from disttrain.operator.kube import _lines

    big = {"type": "MODIFIED", "object": {"metadata": {"name": "w-0"}, "data": "x" * 300_000}}
    body = (json.dumps({"type": "ADDED", "object": {}}) + "\n\n" + json.dumps(big) + "\n"
            + json.dumps({"type": "DELETED", "object": {}})).encode()  # the last line has no newline

    class Chunked:
        def __init__(self, size: int):
            self.content = self
            self.size = size

        async def iter_any(self):
            for start in range(0, len(body), self.size):
                yield body[start:start + self.size]

    async def events(size: int) -> list[str]:
        return [event["type"] async for event in _lines(Chunked(size))]  # type: ignore[arg-type]

    for size in (7, 4096, len(body)):
        assert asyncio.run(events(size)) == ["ADDED", "MODIFIED", "DELETED"], size
