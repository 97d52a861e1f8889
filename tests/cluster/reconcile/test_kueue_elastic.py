"""Elastic jobs follow Kueue's quota on the real Kueue (Workload slices): a 2..4-worker job
admitted at 2 grows to 4 when another job finishes, gives the quota back in place when
scaled down to 2 so that a waiting job starts, loses no step on either change and
finishes at exactly its step count. Its pods are real local torchrun agents (Agents)."""

from __future__ import annotations

import re

import pytest

from .conftest import CHECKPOINT_CLAIM, free_port, get_job, pods_of, wait_job, wait_phase
from .kueue_helpers import (Agents, finish, queued_job, queued_operator, queues, running, status_of, trainer_status,
                            workloads)

pytestmark = pytest.mark.cluster

__all__ = ["queued_operator"]  # the fixture


def live_pods(cluster, namespace: str, name: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods_of(cluster, namespace, name)
                  if not p["metadata"].get("deletionTimestamp"))


def test_an_elastic_job_grows_into_freed_quota_and_gives_it_back_in_place_losing_no_step(
        cluster, namespace, queued_operator, tmp_path):
    queues(cluster, namespace, gpus=4)  # quota for 4 workers of 1 GPU
    cluster.apply(queued_job("blocker", nodes=2, gpusPerNode=1), namespace=namespace)
    running(cluster, namespace, "blocker", queued_operator)

    steps, port = 2000, free_port()
    spec = dict(nodes=4, minNodes=2, maxNodes=4, gpusPerNode=1, precision="32", metrics={"port": port},
                trainer={"builtin": {"model": "gpt-nano", "dataset": "text", "steps": steps, "batchSize": 4}},
                checkpoint={"intervalSteps": 0, "claimName": CHECKPOINT_CLAIM},  # only the stops save
                podTemplate={"metadata": {"annotations": {cluster.POD_IP_ANNOTATION: "127.0.0.1"}}})
    cluster.apply(queued_job("elastic", **spec), namespace=namespace)
    running(cluster, namespace, "elastic", queued_operator)
    # Admitted at 2 of 4 (partial admission); the rest is asked for through a slice that waits.
    job = wait_job(cluster, namespace, "elastic", lambda j: (j["status"].get("admission") or {}).get(
        "growthWorkload"), what="a growth slice asked for", stall=120)
    admission = job["status"]["admission"]
    assert (admission["nodes"], admission["requestedNodes"]) == (2, 4), admission
    assert "insufficient unused quota" in admission["message"] or "not evaluated" in admission["message"], admission
    growth = next(w for w in workloads(cluster, namespace) if w["metadata"]["name"] == admission["growthWorkload"])
    assert growth["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"] == "true"
    assert growth["metadata"]["annotations"]["kueue.x-k8s.io/workload-slice-replacement-for"] == \
        f"{namespace}/{admission['workload']}"
    assert live_pods(cluster, namespace, "elastic") == ["elastic-worker-0", "elastic-worker-1"]

    agents = Agents(cluster, namespace, "elastic", spec, tmp_path / "work", port)
    try:
        agents.start(0), agents.start(1)
        before = cluster.wait_for(lambda: (s := trainer_status(port)) and s.get("step", 0) >= 5 and s,
                                  timeout=600, what="training at world 2")
        assert before["worldSize"] == 2
        first_uids = {p["metadata"]["uid"] for p in pods_of(cluster, namespace, "elastic")}

        finish(cluster, namespace, "blocker")  # its quota frees: Kueue admits the slice, the job grows
        cluster.wait_for(lambda: len(live_pods(cluster, namespace, "elastic")) == 4, timeout=180,
                         what="grown to 4 workers")
        assert first_uids <= {p["metadata"]["uid"] for p in pods_of(cluster, namespace, "elastic")}  # untouched
        grown = wait_job(cluster, namespace, "elastic", lambda j: (j["status"].get("admission") or {}).get(
            "nodes") == 4, what="admitted at 4", stall=120)["status"]["admission"]
        assert grown["workload"] == admission["growthWorkload"] and not grown.get("growthWorkload"), grown
        replaced = next(w for w in workloads(cluster, namespace) if w["metadata"]["name"] == admission["workload"])
        assert any(c["type"] == "Finished" and c["reason"] == "WorkloadSliceReplaced"
                   for c in replaced["status"]["conditions"]), replaced["status"]
        agents.start(2), agents.start(3)
        at_four = cluster.wait_for(lambda: (s := trainer_status(port)) and s.get("worldSize") == 4
                                   and s.get("step", 0) > before["step"] and s, timeout=600, what="training at world 4")

        cluster.apply(queued_job("waiting", nodes=2, gpusPerNode=1), namespace=namespace)
        wait_job(cluster, namespace, "waiting", lambda j: status_of(cluster, namespace, "waiting", "Queued") == "True",
                 what="the other job waits", stall=60)
        cluster.kubectl("scale", "dt/elastic", "-n", namespace, "--replicas=2")
        cluster.wait_for(lambda: live_pods(cluster, namespace, "elastic") == ["elastic-worker-0", "elastic-worker-1"],
                         timeout=120, what="scaled down to 2")
        agents.stop(2, 3)  # the kubelet's SIGTERM to the deleted pods
        running(cluster, namespace, "waiting", queued_operator)  # the quota given back, without an eviction
        shrunk = get_job(cluster, namespace, "elastic")["status"]
        assert shrunk["admission"]["nodes"] == 2 and "given back" in shrunk["admission"]["message"], shrunk
        assert shrunk["phase"] == "Running" and not shrunk.get("eviction") and not shrunk.get("failures"), shrunk
        cluster.wait_for(lambda: (s := trainer_status(port)) and s.get("worldSize") == 2
                         and s.get("step", 0) > at_four["step"] and s, timeout=600, what="training at world 2 again")

        assert agents.procs[0].wait(timeout=1800) == 0 and agents.procs[1].wait(timeout=120) == 0, \
            agents.rank0_story()[-4000:]
        agents.hand_over_reports(0, 1)
    finally:
        agents.stop()
    wait_phase(cluster, namespace, "elastic", "Succeeded", stall=120)
    done = get_job(cluster, namespace, "elastic")["status"]
    assert done["progress"]["step"] == done["progress"]["totalSteps"] == steps
    # Each change stopped every rank at one step and saved it; the next world resumed there.
    story = agents.rank0_story()
    stops = [int(s) for s in re.findall(r"stopped on SIGTERM at step (\d+)", story)]
    resumes = [int(s) for s in re.findall(r"resuming at step (\d+) of", story)]
    assert len(stops) >= 2, story[-4000:]  # grown (once per joining agent, at most), shrunk once
    assert resumes == stops and stops == sorted(stops), (stops, resumes)
    assert re.search(r"\| world 4", story) and re.search(r"\| world 2", story), story[-4000:]
