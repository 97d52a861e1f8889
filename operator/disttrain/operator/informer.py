"""The operator's own cache of its worker pods: list, then watch, per scope.

kopf watched the pods before, and at 500 jobs x 8 pods its per-event machinery (a body,
a patch, a logger and a handler call for every pod event, a per-object memory for every
pod) was about half of the operator's event loop. Pods need none of it: only a summary
per pod (pods.PodInfo) by job, and a nudge to the work queue when a summary changes.
kopf keeps watching what it is good at (the jobs, the nodes, what an integration watches).

- `PodCache` (pure): the summaries by (namespace, job); `apply` one watch event or
  `replace` a scope's list, each returning the jobs whose pods changed. An event that
  changes nothing the operator reads (a new resourceVersion, a kubelet heartbeat of a
  condition's time) queues nothing.
- `PodWatch` (shell): for each scope (the whole cluster with --all-namespaces, else each
  namespace in which a job was seen, so namespace globs need nothing of their own), a
  paged list, then watches from its resourceVersion with bookmarks; a watch that ends is
  resumed where it stopped, an expired one (410) lists again, a refused or broken one is
  tried again on the operator's one back-off schedule. A scope counts as synced once its
  first list is in: the jobs of a namespace are not reconciled before (they would see no
  pods and create them again), and are queued the moment it is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import aiohttp

from disttrain.api.names import JOB_LABEL
from disttrain.api.api_timing import WATCH_SECONDS  # the server ends each watch after this; resumed at once
from disttrain.operator.core.backoff import exponential
from disttrain.operator.clock import Clock
from disttrain.operator.kube import ApiError, Expired, Kube
from disttrain.operator.core.pods import PodInfo, summarize_pod
from disttrain.operator.record import Key

log = logging.getLogger("disttrain.informer")

CLUSTER = None  # the scope of a cluster-wide watch
LIST_PAGE = 500
RETRY_BASE_SECONDS, RETRY_MAX_SECONDS = 1.0, 60.0


def key_of(pod: Mapping[str, Any]) -> Key | None:
    meta = pod.get("metadata") or {}
    job = (meta.get("labels") or {}).get(JOB_LABEL)
    return (meta.get("namespace") or "", job) if job else None


class PodCache(Mapping[Key, list[PodInfo]]):
    """Each job's pods as the watch last told them, by (namespace, job)."""

    def __init__(self) -> None:
        self._jobs: dict[Key, dict[str, PodInfo]] = {}
        self._key_of_pod: dict[tuple[str, str], Key] = {}  # (namespace, pod name) -> its job

    def __getitem__(self, key: Key) -> list[PodInfo]:
        return list(self._jobs[key].values())

    def __iter__(self) -> Iterator[Key]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> set[Key]:
        """One watch event (ADDED, MODIFIED, DELETED); the jobs whose pods changed."""
        meta = pod.get("metadata") or {}
        where = (meta.get("namespace") or "", meta.get("name") or "")
        if event_type == "DELETED":
            return self._remove(where)
        key = key_of(pod)
        if key is None:  # the job label was taken off: no longer a pod of ours
            return self._remove(where)
        changed = set()
        before = self._key_of_pod.get(where)
        if before is not None and before != key:  # relabelled to another job
            changed |= self._remove(where)
        info = summarize_pod(pod)
        pods = self._jobs.setdefault(key, {})
        if pods.get(where[1]) != info:
            pods[where[1]] = info
            self._key_of_pod[where] = key
            changed.add(key)
        return changed

    def replace(self, namespace: str | None, listed: Iterable[tuple[Key, str, PodInfo]]) -> set[Key]:
        """A fresh list of a scope (a namespace, or CLUSTER for all of them; `summaries`
        of its pages): it replaces what was cached there; the jobs whose pods differ."""
        fresh: dict[Key, dict[str, PodInfo]] = {}
        for key, name, info in listed:
            fresh.setdefault(key, {})[name] = info
        old = {key: pods for key, pods in self._jobs.items() if namespace is CLUSTER or key[0] == namespace}
        for key in old:
            del self._jobs[key]
        self._key_of_pod = {where: key for where, key in self._key_of_pod.items()
                            if not (namespace is CLUSTER or where[0] == namespace)}
        for key, named in fresh.items():
            self._jobs[key] = named
            for name in named:
                self._key_of_pod[(key[0], name)] = key
        return {key for key in old.keys() | fresh.keys() if old.get(key) != fresh.get(key)}

    def _remove(self, where: tuple[str, str]) -> set[Key]:
        key = self._key_of_pod.pop(where, None)
        if key is None:
            return set()
        pods = self._jobs.get(key, {})
        pods.pop(where[1], None)
        if not pods:
            self._jobs.pop(key, None)
        return {key}


def summaries(pods: Iterable[Mapping[str, Any]]) -> Iterator[tuple[Key, str, PodInfo]]:
    """(job, pod name, summary) of each pod of ours in a list's page: only these are kept
    while a scope is listed, not the pages (16,000 pods would be hundreds of MiB)."""
    for pod in pods:
        key = key_of(pod)
        if key is not None:
            yield key, (pod.get("metadata") or {}).get("name") or "", summarize_pod(pod)


class PodWatch:
    """Keeps a PodCache current: one list-then-watch task per scope."""

    def __init__(self, kube: Kube, *, on_change: Callable[[Key], None],
                 on_synced: Callable[[str | None], None], cluster_wide: bool, clock: Clock | None = None):
        self.kube, self.on_change, self.on_synced = kube, on_change, on_synced
        self.cluster_wide = cluster_wide
        self.clock = clock or Clock()
        self.cache = PodCache()
        self._tasks: dict[str | None, asyncio.Task[None]] = {}
        self._synced: set[str | None] = set()

    def start(self) -> None:
        if self.cluster_wide:
            self._follow(CLUSTER)

    def want(self, namespace: str) -> None:
        """A job was seen in this namespace: make sure its pods are watched."""
        if not self.cluster_wide and namespace not in self._tasks:
            self._follow(namespace)

    def synced(self, namespace: str) -> bool:
        return (CLUSTER if self.cluster_wide else namespace) in self._synced

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()

    def _follow(self, namespace: str | None) -> None:
        self._tasks[namespace] = asyncio.create_task(self._run(namespace), name=f"pods-{namespace or '*'}")

    async def _run(self, namespace: str | None) -> None:
        where = f"in {namespace}" if namespace else "in all namespaces"
        version: str | None = None  # None: list (again) first
        failures = 0
        while True:
            try:
                if version is None:
                    version = await self._list(namespace)
                    failures = 0
                version, events = await self._watch(namespace, version)
                if events:
                    failures = 0
            except Expired:
                log.info("the watch of pods %s expired; listing them again", where)
                version = None
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
                failures += 1
                delay = exponential(RETRY_BASE_SECONDS, RETRY_MAX_SECONDS, failures)
                log.warning("watching pods %s failed (attempt %d); again in %.0fs: %s", where, failures, delay, exc)
                await self.clock.sleep(delay)

    async def _list(self, namespace: str | None) -> str:
        """Every pod of ours in the scope, page by page, into the cache; its resourceVersion."""
        listed: list[tuple[Key, str, PodInfo]] = []
        page: dict[str, str] = {"labelSelector": JOB_LABEL, "limit": str(LIST_PAGE)}
        while True:
            answer = await self.kube.list_pods(namespace, page)
            listed.extend(summaries(answer.get("items") or []))
            meta = answer.get("metadata") or {}
            if not meta.get("continue"):
                break
            page["continue"] = meta["continue"]
        for key in self.cache.replace(namespace, listed):
            self.on_change(key)
        if namespace not in self._synced:
            self._synced.add(namespace)
            self.on_synced(namespace)
        return str(meta.get("resourceVersion") or "")

    async def _watch(self, namespace: str | None, version: str) -> tuple[str, int]:
        """One watch request until the server ends it: the resourceVersion to resume from,
        and how many events came."""
        events = 0
        params = {"labelSelector": JOB_LABEL, "resourceVersion": version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(WATCH_SECONDS)}
        async for event_type, obj in self.kube.watch_pods(namespace, params):
            events += 1
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if event_type in ("ADDED", "MODIFIED", "DELETED"):
                for key in self.cache.apply(event_type, obj):
                    self.on_change(key)
        return version, events
