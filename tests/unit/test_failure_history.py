"""status.failures: each worker that ended early or cannot start is one entry, with its
cause read from the pod as the kubelet, the scheduler and the control plane write it, its
node, worker, exit code and last words, and the steps it cost; recorded once, bounded,
and counted by cause (failures.py, plan.decide)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from disttrain.api import conditions as c
from disttrain.api import load_job
from disttrain.api.names import CONTAINER_NAME
from disttrain.api.status_types import CheckpointStatus, Progress
from disttrain.operator.core.failures import HISTORY_LIMIT, cause_of, record_failures, steps_lost
from disttrain.operator.core.pods import summarize_pod
from disttrain.render import render_pod

from .helpers import job as job_doc
from .helpers import written
from .plan_builders import NOW, QUIET, RUNNING, at, cond, events, iso, report_json, run, state

STAMP = iso(NOW)


def worker(index=1, *, uid=None, node="node-a", terminating=False, **status):
    """A worker pod of a two-node job with this status, as the API server returns it."""
    j, r, _ = load_job(job_doc(nodes=2))
    body = render_pod(j, r, index)
    body["metadata"]["uid"] = uid or f"uid-{index}"
    body["spec"]["nodeName"] = node
    if terminating:
        body["metadata"]["deletionTimestamp"] = STAMP
    body["status"] = status
    return summarize_pod(body)


def exited(code, reason="Error", message=None, finished="2026-11-22T11:59:58Z", **status):
    terminated = {"exitCode": code, "reason": reason, "finishedAt": finished}
    if message is not None:
        terminated["message"] = message
    return {"phase": "Failed" if code else "Succeeded",
            "containerStatuses": [{"name": CONTAINER_NAME, "state": {"terminated": terminated}}], **status}


def disruption_target(reason, message="", status="True"):
    return {"type": "DisruptionTarget", "status": status, "reason": reason, "message": message}


# Pod statuses as Kubernetes writes them, and the cause each must be recorded as.
CAUSES = [
    pytest.param(exited(1, message="Traceback (most recent call last):\nValueError: bad shape"), "ExitCode",
                 "ValueError: bad shape", id="exit-code-with-the-trainer's-last-line"),
    pytest.param(exited(2), "ExitCode", "Error (exit code 2)", id="exit-code-without-a-message"),
    pytest.param(exited(137, reason="OOMKilled"), "OOMKilled",
                 "the trainer container used more memory than its limit (resources.limits.memory)", id="oom-killed"),
    pytest.param(exited(137, message="killed") | {
        "reason": "Evicted", "message": "The node was low on resource: memory."}, "Evicted",
        "The node was low on resource: memory.", id="kubelet-eviction-under-node-pressure"),
    pytest.param(exited(143, conditions=[disruption_target("EvictionByEvictionAPI", "Eviction API: evicting")]),
                 "Evicted", "Eviction API: evicting", id="eviction-api-a-drain"),
    pytest.param(exited(143, conditions=[disruption_target("PreemptionByScheduler",
                                                           "preempted by team-b/urgent-0")]),
                 "Preempted", "preempted by team-b/urgent-0", id="preempted-by-the-scheduler"),
    pytest.param(exited(143, conditions=[disruption_target("DeletionByTaintManager")]), "NodeLost",
                 "the node stopped reporting, or was removed or shut down", id="taint-manager-unreachable-node"),
    pytest.param(exited(143, conditions=[disruption_target("DeletionByPodGC")]), "NodeLost",
                 "the node stopped reporting, or was removed or shut down", id="pod-gc-deleted-node"),
    pytest.param(exited(143) | {"reason": "Terminated", "message": "Pod was terminated in response to imminent "
                                "node shutdown."}, "NodeLost",
                 "Pod was terminated in response to imminent node shutdown.", id="node-shutdown"),
    pytest.param({"phase": "Pending", "containerStatuses": [{"name": CONTAINER_NAME, "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "ghcr.io/me/typo:1"'}}}]},
        "ImagePullBackOff", 'ImagePullBackOff: Back-off pulling image "ghcr.io/me/typo:1"', id="image-pull-back-off"),
    pytest.param({"phase": "Pending", "containerStatuses": [{"name": CONTAINER_NAME, "state": {"waiting": {
        "reason": "ErrImagePull"}}}]}, "ImagePullBackOff", "ErrImagePull: the image cannot be pulled",
        id="err-image-pull"),
    pytest.param({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                      "reason": "Unschedulable",
                                                      "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]},
                 "Unschedulable", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", id="unschedulable"),
]


@pytest.mark.parametrize("status, cause, message", CAUSES)
def test_each_cause_is_read_from_the_pod_status_kubernetes_writes(status, cause, message):
    pod = worker(**status)
    assert cause_of(pod) == cause
    history, new = record_failures([], [pod], STAMP, Progress(step=250), CheckpointStatus(step=200))
    assert history == new and len(new) == 1
    entry = written(new[0])
    assert entry["cause"] == cause and entry["message"] == message
    assert (entry["pod"], entry["podUID"], entry["rank"], entry["node"]) == ("demo-worker-1", "uid-1", 1, "node-a")
    if cause in ("ImagePullBackOff", "Unschedulable"):
        # A pod that never ran cost no steps, and has no exit code or finish time.
        assert (entry.get("resumedFromStep"), entry.get("stepsLost"), entry.get("exitCode")) == (None, None, None)
        assert entry["time"] == STAMP
    else:
        assert (entry["resumedFromStep"], entry["stepsLost"]) == (200, 50)
        assert entry["time"] == "2026-11-22T11:59:58Z"  # the container's finishedAt, not the pass
        assert entry["exitCode"] == status["containerStatuses"][0]["state"]["terminated"]["exitCode"]


@pytest.mark.parametrize("pod", [
    pytest.param(worker(phase="Running", conditions=[{"type": "Ready", "status": "True"}]), id="running"),
    pytest.param(worker(**exited(0, reason="Completed")), id="finished-exit-0"),
    pytest.param(worker(terminating=True, **exited(143)), id="deleted-by-the-operator-or-a-user"),
    pytest.param(worker(**exited(0, reason="Completed", message=report_json("Interrupted", step=40, ckpt=40))),
                 id="stopped-on-a-signal-after-a-checkpoint-because-a-peer-failed"),
])
def test_nothing_is_recorded_for_pods_that_did_not_fail(pod):
    assert cause_of(pod) is None
    assert record_failures([], [pod], STAMP, None, None) == ([], [])


def test_a_disruption_target_that_is_false_says_nothing():
    pod = worker(**exited(143, conditions=[disruption_target("EvictionByEvictionAPI", status="False")]))
    assert cause_of(pod) == "ExitCode"


def test_a_deleted_pod_with_a_disruption_target_is_recorded_while_it_terminates():
    """The Eviction API and the scheduler's preemption delete the pod gracefully after
    setting DisruptionTarget: it is seen while terminating, and that is the only sight."""
    pod = worker(terminating=True, **exited(143, conditions=[disruption_target("PreemptionByScheduler")]))
    assert cause_of(pod) == "Preempted"
    # Seen while it still runs (no kubelet has stopped it yet): recorded now, at this pass.
    running = worker(terminating=True, phase="Running", conditions=[
        disruption_target("EvictionByEvictionAPI", "Eviction API: evicting")])
    _, new = record_failures([], [running], STAMP, None, None)
    assert [(f.cause, f.time, f.exit_code, f.message) for f in new] == [
        ("Evicted", STAMP, None, "Eviction API: evicting")]
    # Once it has ended, the same pod is not recorded again.
    ended = worker(terminating=True, **exited(143, conditions=[disruption_target("EvictionByEvictionAPI")]))
    assert record_failures(new, [ended], iso(at(5)), None, None)[1] == []


def test_an_ended_pod_is_recorded_once_however_many_passes_see_it():
    crashed = worker(**exited(1))
    history, new = record_failures([], [crashed], STAMP, None, None)
    again, none = record_failures(history, [crashed], iso(at(10)), None, None)
    assert len(new) == 1 and none == [] and again == history
    # The same name, recreated (a new uid), crashing again is a new failure.
    recreated = worker(uid="uid-1b", **exited(1, finished="2026-11-22T12:00:30Z"))
    after, new = record_failures(again, [recreated], iso(at(40)), None, None)
    assert [f.pod_uid for f in after] == ["uid-1", "uid-1b"] and len(new) == 1


def test_a_job_stuck_waiting_is_one_entry_until_something_else_happens():
    stuck = [worker(i, uid=f"u{i}", node="", phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no GPUs"}])
        for i in range(2)]
    history, new = record_failures([], stuck, STAMP, None, None)
    assert [f.cause for f in history] == ["Unschedulable"] and new[0].node is None
    history, _ = record_failures(history, stuck, iso(at(5)), None, None)
    assert len(history) == 1
    # Scheduled now, then one crashes: a new entry; if its replacement waits again, so is that.
    history, _ = record_failures(history, [worker(1, uid="u1", **exited(1))], iso(at(60)), None, None)
    history, _ = record_failures(history, [worker(1, uid="u9", node="", phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no GPUs"}])],
        iso(at(90)), None, None)
    assert [f.cause for f in history] == ["Unschedulable", "ExitCode", "Unschedulable"]


def test_the_history_keeps_the_newest_entries_oldest_first():
    history = []
    for n in range(HISTORY_LIMIT + 5):
        pod = worker(uid=f"uid-{n:02d}", **exited(1, finished=iso(at(n))))
        history, _ = record_failures(history, [pod], iso(at(n)), None, None)
    assert len(history) == HISTORY_LIMIT
    assert [f.pod_uid for f in history] == [f"uid-{n:02d}" for n in range(5, HISTORY_LIMIT + 5)]


def test_new_entries_of_one_pass_are_in_time_order():
    late = worker(0, **exited(1, finished="2026-11-22T11:59:59Z"))
    early = worker(1, **exited(1, finished="2026-11-22T11:59:57Z"))
    _, new = record_failures([], [late, early], STAMP, None, None)
    assert [f.rank for f in new] == [1, 0]


@pytest.mark.parametrize("progress, checkpoint, expected", [
    (None, None, (None, None)),                                   # the trainer said nothing
    (None, CheckpointStatus(step=100), (100, None)),             # a checkpoint, no step seen
    (Progress(step=40), None, (0, 40)),                          # no checkpoint: from the start
    (Progress(step=250), CheckpointStatus(step=200), (200, 50)),
    (Progress(step=200), CheckpointStatus(step=200), (200, 0)),  # saved on the step it stopped on
    (Progress(step=190), CheckpointStatus(step=200), (200, 0)),  # the report lagged the save
])
def test_steps_lost_are_the_steps_since_the_newest_checkpoint(progress, checkpoint, expected):
    assert steps_lost(progress, checkpoint) == expected


# ---- in plan.decide -----------------------------------------------------------------


def test_decide_records_a_crash_with_the_newest_report_and_keeps_it_after_the_restart():
    st = state(RUNNING, nodes=2, **QUIET)
    st = replace(st, status=replace(st.status, progress=Progress(step=130, total_steps=400),
                                    checkpoint=CheckpointStatus(step=100, time=STAMP, path="/ck/step-00000100")))
    crashed = worker(1, **exited(1, message="RuntimeError: NCCL timeout"))
    healthy = worker(0, phase="Running", conditions=[{"type": "Ready", "status": "True"}])
    plan = run(st, [healthy, crashed])
    assert [(f.cause, f.rank, f.resumed_from_step, f.steps_lost, f.message) for f in plan.new_failures] == [
        ("ExitCode", 1, 100, 30, "RuntimeError: NCCL timeout")]
    assert plan.status.failures == plan.new_failures
    # The next pass (the same crashed pod, back-off running) adds nothing.
    later = run(replace(st, status=plan.status), [healthy, crashed], now=at(5))
    assert later.new_failures == [] and later.status.failures == plan.status.failures
    # Once the job is running again, the history stays.
    back = run(replace(st, status=later.status), [healthy, worker(1, uid="uid-new", phase="Running",
                                                                 conditions=[{"type": "Ready", "status": "True"}])],
               now=at(30))
    assert back.status.phase == "Running" and back.status.failures == plan.status.failures


def test_a_suspended_job_records_nothing_while_its_pods_go():
    st = state(RUNNING, nodes=2, suspend=True, **QUIET)
    plan = run(st, [worker(1, **exited(143))])
    assert plan.status.phase == "Suspended" and plan.new_failures == [] and plan.status.failures is None


def test_a_worker_that_cannot_pull_its_image_says_so_on_the_job():
    st = state({"phase": "Pending", "startTime": STAMP}, nodes=2, **QUIET)
    waiting = {"phase": "Pending", "containerStatuses": [{"name": CONTAINER_NAME, "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "typo:1"'}}}]}
    pods = [worker(0, **waiting), worker(1, **waiting)]
    plan = run(st, pods)
    running = cond(plan, c.RUNNING)
    assert (running["status"], running["reason"]) == ("False", "ImagePullBackOff")
    assert running["message"] == ('demo-worker-0 cannot pull its image: ImagePullBackOff: Back-off pulling image '
                                  '"typo:1"; check spec.image and the pull secrets (podTemplate.spec.imagePullSecrets)')
    assert [e for e in events(plan) if e[1] == "ImagePullBackOff"] == [("Warning", "ImagePullBackOff",
                                                                         running["message"])]
    assert [f.cause for f in plan.status.failures] == ["ImagePullBackOff"]
    # The next pass posts no second Event and adds no entry.
    again = run(replace(st, status=plan.status), pods, now=at(5))
    assert [e for e in events(again) if e[1] == "ImagePullBackOff"] == [] and again.new_failures == []
