"""Kueue as an external framework: the Workload a labelled job gets, what Kueue's status
on it means for the job (plan.decide), and the status changes the operator writes back.
The cluster tests (tests/cluster/reconcile/test_kueue.py) run the same against the real
Kueue; here each rule is pinned on its own."""

from __future__ import annotations

import dataclasses

from disttrain.api import conditions as c
from disttrain.operator.core import failures
from disttrain.integrations.kueue import workload as kueue
from disttrain.integrations.kueue.admission import QueueIgnored, queue_stop_cause
from disttrain.api import load_job
from disttrain.operator.core.plan import decide
from disttrain.render import render_pod
from disttrain.api.report import TrainerReport
from disttrain.api.status_types import CheckpointStatus

from .helpers import job as job_doc
from .kueue_builders import ELASTIC, GPU, PENDING, UID, admitted, asked, evicted, queued, workload
from .plan_builders import NOW, POLICY, QUIET, at, cond, iso, pod, state

# ---- the Workload ------------------------------------------------------------------


def test_the_workload_holds_one_pod_set_of_the_worker_template_owned_by_the_job():
    body = workload(GPU)
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2" and body["kind"] == "Workload"
    meta = body["metadata"]
    assert meta["name"].startswith("distributedtraining-demo-") and meta["namespace"] == "team-a"
    assert meta["ownerReferences"] == [{"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
                                        "name": "demo", "uid": UID, "controller": True,
                                        "blockOwnerDeletion": True}]
    (pod_set,) = body["spec"]["podSets"]
    assert (pod_set["name"], pod_set["count"]) == ("workers", 2) and "minCount" not in pod_set
    container = pod_set["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "4"
    assert body["spec"]["queueName"] == "team-a" and "priority" not in body["spec"]


def test_an_elastic_job_asks_for_partial_admission_down_to_min_nodes():
    (pod_set,) = workload(ELASTIC)["spec"]["podSets"]
    assert (pod_set["count"], pod_set["minCount"]) == (4, 2)
    # It asks for the nodes it runs at now, not for maxNodes: 3 of 2..4 reserves 3 workers' quota.
    (pod_set,) = workload({**ELASTIC, "nodes": 3})["spec"]["podSets"]
    assert (pod_set["count"], pod_set["minCount"]) == (3, 2)


def test_priority_comes_from_kueues_label_first_then_the_pods_priority_class():
    job, _, _ = load_job(job_doc(scheduling={"priorityClassName": "high"}, **QUIET))
    assert kueue.priority_source(job, {}) == ("PriorityClass", "high")
    assert kueue.priority_source(job, {kueue.PRIORITY_LABEL: "urgent"}) == ("WorkloadPriorityClass", "urgent")
    body = workload(GPU, priority=kueue.Priority(kind="WorkloadPriorityClass", name="urgent", value=1000))
    assert body["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                                "name": "urgent"}
    assert body["spec"]["priority"] == 1000


def test_the_flavors_node_labels_and_tolerations_make_the_placement():
    view = kueue.view_of(workload(ELASTIC, status=admitted(count=3)))
    flavor = {"spec": {"nodeLabels": {"pool": "a100"},
                       "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    placement = kueue.placement_of(view, {"gpu-a": flavor})
    assert placement.node_selector == {"pool": "a100"} and placement.count == 3
    assert placement.tolerations == ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},)
    job, resolved, _ = load_job(job_doc(**ELASTIC))
    pod_body = render_pod(job, resolved, 1, node_selector=placement.node_selector, tolerations=placement.tolerations)
    assert pod_body["spec"]["nodeSelector"] == {"pool": "a100"}
    assert {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_body["spec"]["tolerations"]


def test_the_flavors_node_labels_win_over_the_specs_own_selector():
    """operations.md, Kueue: a flavor's label wins over the spec's (the quota reserved is
    that flavor's); the spec's other labels stay."""
    job, resolved, _ = load_job(job_doc(**ELASTIC, podTemplate={"spec": {"nodeSelector": {
        "pool": "cpu", "zone": "eu-1"}}}))
    pod_body = render_pod(job, resolved, 0, node_selector={"pool": "a100"}, tolerations=())
    assert pod_body["spec"]["nodeSelector"] == {"pool": "a100", "zone": "eu-1"}


def test_release_gives_the_quota_back_and_requeues_a_preempted_workload():
    body = workload(GPU, status=evicted())
    status = kueue.release(body, iso(NOW))
    assert "admission" not in status
    kinds = {cnd["type"]: cnd for cnd in status["conditions"]}
    assert (kinds["QuotaReserved"]["status"], kinds["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert (kinds["Admitted"]["status"], kinds["Admitted"]["reason"]) == ("False", "NoReservation")
    assert (kinds["Requeued"]["status"], kinds["Requeued"]["reason"]) == ("True", "Preempted")
    assert kinds["Evicted"]["status"] == "True"  # Kueue's own, kept
    assert kueue.release({**body, "status": status}, iso(NOW)) is None  # nothing held any more
    deactivated = kueue.release(workload(GPU, status=evicted("InactiveWorkload", "deactivated")), iso(NOW))
    assert {cnd["type"]: cnd["status"] for cnd in deactivated["conditions"]}["Requeued"] == "False"


def test_finish_marks_the_workload_finished_once():
    body = workload(GPU, status=admitted())
    status = kueue.finish(body, True, "training finished", iso(NOW))
    done = {cnd["type"]: cnd for cnd in status["conditions"]}["Finished"]
    assert (done["status"], done["reason"], done["message"]) == ("True", "Succeeded", "training finished")
    assert kueue.finish({**body, "status": status}, True, "again", iso(NOW)) is None


# ---- the job's decision ------------------------------------------------------------


def test_a_labelled_job_creates_its_workload_and_no_worker():
    plan = decide(queued(GPU), [], NOW, POLICY)
    assert asked(plan).create_workload and not plan.create
    assert plan.status.phase == "Pending"
    assert cond(plan, c.QUEUED)["status"] == "True" and cond(plan, c.QUEUED)["reason"] == c.WORKLOAD_CREATED


def test_a_job_waiting_for_quota_says_kueues_reason_and_runs_nothing():
    plan = decide(queued(GPU, wl=workload(GPU, status=PENDING)), [], NOW, POLICY)
    assert not plan.create and not asked(plan).create_workload
    queued_cond = cond(plan, c.QUEUED)
    assert queued_cond["status"] == "True" and queued_cond["reason"] == "Pending"
    assert "insufficient unused quota for nvidia.com/gpu in flavor gpu-a, 8 more needed" in queued_cond["message"]
    assert "LocalQueue team-a" in queued_cond["message"]
    named = decide(queued(GPU, wl=workload(GPU, status=PENDING), cluster_queue="cq-a"), [],
                   NOW, POLICY)
    assert cond(named, c.QUEUED)["message"].startswith("waiting in LocalQueue team-a (ClusterQueue cq-a): couldn't")
    assert plan.status.phase == "Pending" and plan.status.workers.desired == 0


def test_a_workload_kueue_has_not_evaluated_says_why_it_has_no_words():
    plan = decide(queued(GPU, {"phase": "Pending"}, wl=workload(GPU)), [], NOW, POLICY)
    queued_cond = cond(plan, c.QUEUED)
    assert queued_cond["reason"] == "Pending" and not plan.create
    # What Kueue does (its batch Jobs' Workloads wait so too), never a claim it contradicts.
    assert queued_cond["message"] == ("waiting in LocalQueue team-a: not evaluated by Kueue yet: its Workload has "
                                      "no QuotaReserved condition (behind a head that does not fit, a StrictFIFO "
                                      "ClusterQueue tries no other Workload, and a BestEffortFIFO one skips those "
                                      "of the head's shape)")


def test_a_workload_of_an_older_spec_is_replaced_while_it_waits():
    old = workload({**GPU, "nodes": 3}, status=PENDING)
    plan = decide(queued(GPU, wl=old), [], NOW, POLICY)
    assert asked(plan).delete_workload and not asked(plan).create_workload and not plan.create


def test_an_admitted_job_creates_its_workers_and_says_where():
    plan = decide(queued(GPU, {"phase": "Pending"}, wl=workload(GPU, status=admitted())), [], NOW, POLICY)
    assert plan.create == [0, 1]
    adm = cond(plan, c.ADMITTED)
    assert adm["status"] == "True" and adm["message"] == "admitted by ClusterQueue cq-team-a: 2 workers"
    assert cond(plan, c.QUEUED) is None  # never queued as far as this status knows: not added as False


def test_an_elastic_job_admitted_with_fewer_nodes_runs_at_that_size():
    plan = decide(queued(ELASTIC, wl=workload(ELASTIC, status=admitted(count=3))), [], NOW, POLICY)
    assert plan.create == [0, 1, 2]
    assert "3 of 4 workers (minNodes 2)" in cond(plan, c.ADMITTED)["message"]
    pods = [pod(i, **ELASTIC) for i in range(4)]
    shrink = decide(queued(ELASTIC, {"phase": "Running", "startTime": iso(NOW)},
                           wl=workload(ELASTIC, status=admitted(count=3))), pods, NOW, POLICY)
    assert [name for name, _ in shrink.delete] == ["demo-worker-3"]


RUNNING = {"phase": "Running", "startTime": iso(at(-600)), "restarts": 0,
           "conditions": [{"type": "Running", "status": "True", "reason": "PodsRunning", "message": "",
                           "lastTransitionTime": iso(at(-600))}]}


def test_an_evicted_job_checkpoints_first_then_its_pods_go_then_the_quota():
    spec = {**GPU, "checkpoint": {"intervalSteps": 100, "evictGraceSeconds": 60}}
    wl = workload(spec, status=evicted())
    pods = [pod(i, **spec) for i in range(2)]
    report = TrainerReport(step=250, checkpoint=CheckpointStatus(step=200, time=iso(at(-30))))
    asking = decide(queued(spec, RUNNING, wl), pods, NOW, POLICY, report=report)
    assert asking.ask_checkpoint == (120, 60.0) and not asking.delete and not asked(asking).release_workload
    assert asking.status.eviction.reason == "Evicted" and asking.status.eviction.handshake == "Requested"
    assert cond(asking, c.EVICTED)["reason"] == "Preempted"
    assert asking.status.phase == "Running"  # it keeps its phase while it checkpoints

    held = TrainerReport(step=250, held_at_step=250, checkpoint=CheckpointStatus(step=250, time=iso(at(1))))
    stopping = decide(queued(spec, asking.status, wl), pods, at(2), POLICY, report=held)
    assert sorted(name for name, _ in stopping.delete) == ["demo-worker-0", "demo-worker-1"]
    assert not asked(stopping).release_workload  # the workers still hold the GPUs
    assert stopping.status.eviction.handshake == "Checkpointed" and stopping.status.eviction.steps_lost == 0
    assert stopping.status.phase == "Pending" and cond(stopping, c.QUEUED)["status"] == "True"

    ending = [pod(i, terminating=True, **spec) for i in range(2)]
    assert not asked(decide(queued(spec, stopping.status, wl), ending, at(3), POLICY)).release_workload
    gone = decide(queued(spec, stopping.status, wl), [], at(5), POLICY)
    assert asked(gone).release_workload and not gone.create
    assert gone.status.eviction.resume_from_step == 250


def test_readmitted_after_an_eviction_the_job_runs_again_with_its_progress():
    spec = {**GPU, "checkpoint": {"intervalSteps": 100}}
    wl = workload(spec, status=evicted())
    gone = decide(queued(spec, RUNNING, wl), [], NOW, POLICY)
    assert asked(gone).release_workload and cond(gone, c.EVICTED)["status"] == "True"
    again = decide(queued(spec, gone.status, workload(spec, status=admitted())), [], at(30), POLICY)
    assert again.create == [0, 1]
    assert cond(again, c.EVICTED)["status"] == "False" and cond(again, c.QUEUED)["status"] == "False"
    assert cond(again, c.ADMITTED)["status"] == "True"


def test_a_kueue_eviction_is_a_stop_in_the_history_and_its_wait_is_lost_to_it():
    """Preempted five times overnight, a job's history says so after it runs again: each
    Kueue eviction is one entry (no pod: the whole job; no backoffLimit spent), priced
    as the stop settled, and the time it then waits in the queue is lost to that cause."""
    spec = {**GPU, "checkpoint": {"intervalSteps": 100, "evictGraceSeconds": 60}}
    message = "Preempted to accommodate a workload (UID: 77) due to prioritization in the ClusterQueue"
    wl = workload(spec, status=evicted(message=message))
    pods = [pod(i, **spec) for i in range(2)]
    report = TrainerReport(step=250, checkpoint=CheckpointStatus(step=200, time=iso(at(-30))))
    asking = decide(queued(spec, RUNNING, wl), pods, NOW, POLICY, report=report)
    assert not asking.status.failures  # not stopped yet: the trainer checkpoints
    held = TrainerReport(step=250, held_at_step=250, checkpoint=CheckpointStatus(step=250, time=iso(at(1))))
    stopping = decide(queued(spec, asking.status, wl), pods, at(2), POLICY, report=held)
    (entry,) = stopping.status.failures
    assert (entry.cause, entry.time, entry.pod, entry.rank) == ("Preempted", iso(at(2)), None, None)
    assert entry.message == f"evicted by Kueue (Preempted): {message}"
    assert (entry.resumed_from_step, entry.steps_lost) == (250, 0)
    assert stopping.new_failures == [entry] and stopping.status.restarts == 0

    gone = decide(queued(spec, stopping.status, wl), [], at(12), POLICY)
    assert len(gone.status.failures) == 1  # recorded once
    waited = decide(queued(spec, gone.status, workload(spec, status=PENDING)), [], at(72), POLICY)
    # 60 s in the queue after the eviction, for 2 workers: lost to the preemption.
    assert waited.lost_seconds == {"Preempted": 120.0}
    assert waited.status.goodput.lost_seconds - gone.status.goodput.lost_seconds == 120.0
    assert waited.status.goodput.waiting_seconds == gone.status.goodput.waiting_seconds
    again = decide(queued(spec, waited.status, workload(spec, status=admitted())), [], at(80), POLICY)
    assert again.create == [0, 1] and [f.cause for f in again.status.failures] == ["Preempted"]


def test_each_kueue_eviction_reason_has_a_cause_users_can_filter_on():
    assert [queue_stop_cause(r) for r in ("Preempted", "PodsReadyTimeout", "ClusterQueueStopped",
                                                   "InactiveWorkload", "NodeFailures")] == [
        "Preempted", "PodsReadyTimeout", "QueueEvicted", "QueueEvicted", "QueueEvicted"]
    assert {"PodsReadyTimeout", "QueueEvicted", "NodeDrain"} <= set(failures.CAUSES)


def test_a_finished_job_finishes_its_workload():
    spec = {**GPU, "nodes": 1}
    done = [pod(0, phase="Succeeded", exit_code=0, **spec)]
    plan = decide(queued(spec, RUNNING, workload(spec, status=admitted())), done, NOW, POLICY)
    assert plan.status.phase == "Succeeded" and asked(plan).finish_workload == (True, "training finished (demo-worker-0 "
                                                                               "exited 0)")


def test_a_suspended_job_deactivates_its_workload_and_gives_the_quota_back():
    spec = {**GPU, "suspend": True}
    plan = decide(queued(spec, RUNNING, workload(spec, status=admitted())), [], NOW, POLICY)
    assert plan.status.phase == "Suspended" and asked(plan).workload_active is False and not asked(plan).release_workload
    wl = workload(spec, status=evicted("InactiveWorkload", "The workload is deactivated"))
    wl["spec"]["active"] = False
    released = decide(queued(spec, plan.status, wl), [], at(1), POLICY)
    assert asked(released).release_workload and asked(released).workload_active is None
    resumed = decide(queued(GPU, released.status, {**wl, "status": PENDING}), [], at(2), POLICY)
    assert asked(resumed).workload_active is True and not resumed.create


def with_pods_ready(status: dict, value: bool, reason: str) -> dict:
    return {**status, "conditions": [*status["conditions"], {
        "type": "PodsReady", "status": "True" if value else "False", "reason": reason, "message": "",
        "lastTransitionTime": iso(at(-30))}]}


def test_pods_ready_follows_the_workers_as_kueues_own_job_kinds_say_it():
    """Kueue's waitForPodsReady (on by default: 30 minutes) evicts an admitted Workload
    whose PodsReady never turns True; its recoveryTimeout one that stays False after a
    worker failed. The operator says it as Kueue's jobframework does for a batch Job."""
    spec = {**GPU, "checkpoint": {"intervalSteps": 100}}
    starting = [pod(0, **spec), pod(1, phase="Pending", ready=False, **spec)]
    plan = decide(queued(spec, RUNNING, workload(spec, status=admitted())), starting, NOW, POLICY)
    assert asked(plan).workload_pods_ready == (False, "WaitForStart")
    both = [pod(i, **spec) for i in range(2)]
    wl = workload(spec, status=with_pods_ready(admitted(), False, "WaitForStart"))
    assert asked(decide(queued(spec, RUNNING, wl), both, NOW, POLICY)).workload_pods_ready == (True, "Started")
    wl = workload(spec, status=with_pods_ready(admitted(), True, "Started"))
    assert asked(decide(queued(spec, RUNNING, wl), both, NOW, POLICY)).workload_pods_ready is None  # said already
    # A worker crashed after the start: False until its replacement is Ready, then Recovered.
    crashed = [pod(0, **spec), pod(1, phase="Failed", exit_code=1, **spec)]
    assert asked(decide(queued(spec, RUNNING, wl), crashed, NOW, POLICY)).workload_pods_ready == (False, "WaitForRecovery")
    wl = workload(spec, status=with_pods_ready(admitted(), False, "WaitForRecovery"))
    replaced = [pod(0, **spec), pod(1, phase="Pending", ready=False, **spec)]
    assert asked(decide(queued(spec, RUNNING, wl), replaced, NOW, POLICY)).workload_pods_ready is None
    assert asked(decide(queued(spec, RUNNING, wl), both, NOW, POLICY)).workload_pods_ready == (True, "Recovered")


def test_the_workload_carries_the_newest_committed_checkpoint_for_preemption_tooling():
    """kueue#477: the Workload's annotations say the job's newest checkpoint (step, time),
    written when it changes, never for a job with none, and left alone once it finished."""
    spec = {**GPU, "checkpoint": {"intervalSteps": 100}}
    both = [pod(i, **spec) for i in range(2)]
    saved = {**RUNNING, "checkpoint": {"step": 200, "time": iso(at(-60)), "path": "/checkpoints/step-00000200"}}
    wl = workload(spec, status=with_pods_ready(admitted(), True, "Started"))
    assert asked(decide(queued(spec, RUNNING, wl), both, NOW, POLICY)).workload_checkpoint is None  # none saved yet
    plan = decide(queued(spec, saved, wl), both, NOW, POLICY)
    assert asked(plan).workload_checkpoint == (200, iso(at(-60)))
    wl["metadata"]["annotations"].update(kueue.checkpoint_annotations(*asked(plan).workload_checkpoint)["metadata"]["annotations"])
    assert wl["metadata"]["annotations"]["disttrain.dev/checkpoint-step"] == "200"
    assert asked(decide(queued(spec, saved, wl), both, NOW, POLICY)).workload_checkpoint is None  # said already
    newer = {**saved, "checkpoint": {"step": 300, "time": iso(at(-1)), "path": "/checkpoints/step-00000300"}}
    assert asked(decide(queued(spec, newer, wl), both, NOW, POLICY)).workload_checkpoint == (300, iso(at(-1)))
    wl["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "",
                                       "lastTransitionTime": iso(at(-1))})
    assert asked(decide(queued(spec, newer, wl), both, NOW, POLICY)).workload_checkpoint is None


def test_pods_ready_is_left_to_kueue_while_the_workload_waits_is_evicted_or_ends():
    spec = {**GPU, "checkpoint": {"intervalSteps": 100}}
    both = [pod(i, **spec) for i in range(2)]
    for status in (PENDING, evicted(), evicted("PodsReadyTimeout", "Exceeded the PodsReady timeout")):
        assert asked(decide(queued(spec, RUNNING, workload(spec, status=status)), both, NOW, POLICY)).workload_pods_ready \
            is None, status
    done = [pod(i, phase="Succeeded", exit_code=0, **spec) for i in range(2)]
    plan = decide(queued(spec, RUNNING, workload(spec, status=admitted())), done, NOW, POLICY)
    assert plan.status.phase == "Succeeded" and asked(plan).finish_workload and asked(plan).workload_pods_ready is None


def test_release_starts_pods_ready_over_so_a_readmission_waits_for_a_start_not_a_recovery():
    body = workload(GPU, status=with_pods_ready(evicted(), True, kueue.STARTED))
    status = kueue.release(body, iso(NOW))
    ready = next(c for c in status["conditions"] if c["type"] == "PodsReady")
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == ("False", "WaitForStart", iso(NOW))
    never = kueue.release(workload(GPU, status=evicted()), iso(NOW))
    assert not any(c["type"] == "PodsReady" for c in never["conditions"])  # never said: left to Kueue


def test_the_pods_ready_write_changes_only_that_condition_and_only_while_admitted():
    body = workload(GPU, status=admitted())
    status = kueue.pods_ready(body, True, kueue.STARTED, iso(NOW))
    ready = next(c for c in status["conditions"] if c["type"] == "PodsReady")
    assert ready == {"type": "PodsReady", "status": "True", "reason": "Started", "observedGeneration": 1,
                     "message": "All pods reached readiness and the workload is running",
                     "lastTransitionTime": iso(NOW)}
    assert status["admission"] == body["status"]["admission"]
    assert [c for c in status["conditions"] if c["type"] != "PodsReady"] == body["status"]["conditions"]
    assert kueue.pods_ready({**body, "status": status}, True, kueue.STARTED, iso(at(5))) is None
    assert kueue.pods_ready(workload(GPU, status=PENDING), True, kueue.STARTED, iso(NOW)) is None


def test_the_label_on_an_operator_without_kueue_runs_the_job_and_warns():
    plan = decide(dataclasses.replace(state(None, **GPU), joined=(QueueIgnored(queue="team-a"),)), [], NOW, POLICY)
    assert plan.create == [0, 1]
    assert any(e.reason == c.QUEUE_IGNORED and "kueue.x-k8s.io/queue-name=team-a" in e.message for e in plan.events)


def test_queue_label_and_workload_names():
    assert kueue.queue_of({kueue.QUEUE_LABEL: "team-a"}) == "team-a"
    assert kueue.queue_of({kueue.QUEUE_LABEL: " "}) is None and kueue.queue_of(None) is None
    long = kueue.workload_name("x" * 63, UID)
    assert len(long) <= 63 and long != kueue.workload_name("x" * 63, UID.replace("0", "9"))
    assert kueue.FRAMEWORK == "DistributedTraining.v1alpha1.disttrain.dev"
