"""The failure history of a job (status.failures), as pure functions.

Each worker pod that ended before the job finished, or cannot start, becomes one
`FailureRecord`: its cause in a user's words (docs/operations.md, "When things fail"),
the node, the worker, the exit code and the cluster's or trainer's last words, and what
it cost: the checkpoint step training starts again from and the steps done again. The
history keeps the newest HISTORY_LIMIT entries, oldest first; the Events about the same
failures expire after an hour, the history stays with the job.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Collection, Iterable, Mapping, get_args

from disttrain.api.status_types import CAUSE, FailureCause
from disttrain.api.status_types import AvoidedNode, CheckpointStatus, Eviction, FailureRecord, Progress
from disttrain.operator.core.nodes import EPOCH, NodeHealth
from disttrain.operator.core.pods import PodInfo
from disttrain.api.pod_contract import INTERRUPTED
from disttrain.api.times import iso, parse_time

# The causes the core records, named from the API's list (FailureCause, spelled there once);
# an integration declares those only it records (Integration.causes).
NODE_LOST = CAUSE.NODE_LOST
EVICTED = CAUSE.EVICTED
PREEMPTED = CAUSE.PREEMPTED
OOM_KILLED = CAUSE.OOM_KILLED
EXIT_CODE = CAUSE.EXIT_CODE
HUNG = CAUSE.HUNG
IMAGE_PULL_BACK_OFF = CAUSE.IMAGE_PULL_BACK_OFF
UNSCHEDULABLE = CAUSE.UNSCHEDULABLE
NODE_DRAIN = CAUSE.NODE_DRAIN
NODE_UNHEALTHY = CAUSE.NODE_UNHEALTHY  # one entry per node the workers were moved off
STRAGGLER = CAUSE.STRAGGLER  # one entry per straggler's node the workers were moved off
# Stops of the whole job it did not ask for (stop_record): no pod, no backoffLimit spent;
# an integration's own stops are priced with them (price_stop's `also`).
STOPS = frozenset({PREEMPTED, NODE_DRAIN, NODE_UNHEALTHY, STRAGGLER})
MOVED_OFF = frozenset({NODE_UNHEALTHY, STRAGGLER})  # its node is avoided at once
CAUSES: tuple[str, ...] = get_args(FailureCause)  # the API's list, in its order

HISTORY_LIMIT = 16  # status.failures' maxItems

# The pod's status.reason, or its DisruptionTarget condition's reason, -> the cause.
_BY_REASON = {
    # The scheduler made room for a pod of higher priority.
    "PreemptionByScheduler": PREEMPTED, "Preempting": PREEMPTED,
    # The node is gone: unreachable (the taint manager), deleted (pod GC), or shut down.
    "DeletionByTaintManager": NODE_LOST, "DeletionByPodGC": NODE_LOST, "NodeLost": NODE_LOST,
    "Shutdown": NODE_LOST, "Terminated": NODE_LOST,
    # The kubelet (node pressure, admission) or the Eviction API (a drain) ended it.
    "Evicted": EVICTED, "EvictionByEvictionAPI": EVICTED, "TerminationByKubelet": EVICTED,
    "NodeAffinity": EVICTED, "OutOfcpu": EVICTED, "OutOfmemory": EVICTED, "UnexpectedAdmissionError": EVICTED,
}
# Causes of pods that never ran: one entry for a job stuck on them, not one per pod.
WAITING = frozenset({IMAGE_PULL_BACK_OFF, UNSCHEDULABLE})
_DEFAULT_MESSAGE = {
    OOM_KILLED: "the trainer container used more memory than its limit (resources.limits.memory)",
    NODE_LOST: "the node stopped reporting, or was removed or shut down",
    EVICTED: "the pod was evicted",
    PREEMPTED: "preempted to make room for a pod of higher priority",
}


def cause_of(pod: PodInfo) -> str | None:
    """Why a worker pod ended before the job finished, or cannot start; None when there is
    nothing to record: it runs, it finished, someone deleted it (the operator's own
    deletions, a user's `kubectl delete pod`: no DisruptionTarget condition says why), or
    its trainer stopped on a signal after a checkpoint with no word from the cluster (a
    peer's failure or a deletion stopped it: that one is the failure).

    A DisruptionTarget condition is read as soon as it appears, before the pod has ended:
    the Eviction API, preemption and the taint manager set it and then delete the pod,
    which may be gone before its end is ever seen."""
    if pod.disruption and not pod.finished:
        return _BY_REASON.get(pod.disruption, EVICTED)
    if pod.ended_early:
        if pod.terminating:
            return None
        by_reason = _BY_REASON.get(pod.reason)
        if by_reason is not None:
            return by_reason
        if pod.report is not None and pod.report.outcome == INTERRUPTED:
            return None
        return OOM_KILLED if pod.reason == OOM_KILLED else EXIT_CODE
    if pod.active and not pod.terminating:
        if pod.image_pull:
            return IMAGE_PULL_BACK_OFF
        if pod.unschedulable:
            return UNSCHEDULABLE
    return None


def failure_record(pod: PodInfo, cause: str, stamp: str, progress: Progress | None,
                   checkpoint: CheckpointStatus | None) -> FailureRecord:
    """One entry of the history. `stamp` is now, for pods with no finish time of their own;
    progress and checkpoint are the job's newest (the pod's own final report included)."""
    resumed, lost = (None, None) if cause in WAITING else steps_lost(progress, checkpoint)
    ended = parse_time(pod.ended_at)
    return FailureRecord(
        time=iso(ended) if ended else stamp, cause=cause, node=pod.node or None, pod=pod.name, pod_uid=pod.uid,
        rank=pod.index, exit_code=pod.exit_code, message=_message(pod, cause) or None,
        resumed_from_step=resumed, steps_lost=lost)


def steps_lost(progress: Progress | None, checkpoint: CheckpointStatus | None) -> tuple[int | None, int | None]:
    """(the step training starts again from, the steps done since then): the newest
    checkpoint's step (0 without one) and the newest reported step minus it. Unknown
    (None, None) while the trainer has reported no step."""
    step = progress.step if progress is not None else None
    saved = checkpoint.step if checkpoint is not None else None
    if step is None:
        return saved, None
    resumed = saved or 0
    return resumed, max(0, step - resumed)


def _message(pod: PodInfo, cause: str) -> str:
    if cause == IMAGE_PULL_BACK_OFF:
        return pod.image_pull
    if cause == UNSCHEDULABLE:
        return pod.unschedulable
    if cause == EXIT_CODE:
        code = f"exit code {pod.exit_code}" if pod.exit_code is not None else "no exit code"
        return pod.last_words or pod.message or f"{pod.reason or 'Error'} ({code})"
    return pod.message or pod.last_words or _DEFAULT_MESSAGE.get(cause, "")


def record_failures(history: Iterable[FailureRecord], pods: Iterable[PodInfo], stamp: str,
                    progress: Progress | None, checkpoint: CheckpointStatus | None, *,
                    lost: Mapping[str, NodeHealth] | None = None) -> tuple[list[FailureRecord], list[FailureRecord]]:
    """(the history with the new failures among `pods` added, bounded; the new entries).
    `lost`: pod name -> its node, for workers whose node is lost (recovery.lost_workers).
    A pod is recorded once per cause (by uid: every pass sees an ended pod until it is
    replaced); a job waiting on an image or on the scheduler is one entry until
    something else happens, however many of its pods wait."""
    kept = list(history)
    lost = lost or {}
    seen = {(f.pod_uid or f.pod, f.cause) for f in kept}
    new: list[FailureRecord] = []
    for pod in sorted(pods, key=lambda p: (p.index is None, p.index or 0, p.name)):
        node = lost.get(pod.name)
        cause = NODE_LOST if node is not None else cause_of(pod)
        if cause is None or (pod.uid or pod.name, cause) in seen:
            continue
        last = (kept + new)[-1:]
        if cause in WAITING and last and last[0].cause == cause:
            continue
        entry = failure_record(pod, cause, stamp, progress, checkpoint)
        if node is not None:  # the node's words, and the moment it was lost
            since = node.lost_since()
            entry.message, entry.time = node.describe()[:1024], iso(since) if since and since != EPOCH else stamp
        new.append(entry)
        seen.add((pod.uid or pod.name, cause))
    new.sort(key=lambda f: (f.time or "", f.rank if f.rank is not None else -1))
    return (kept + new)[-HISTORY_LIMIT:], new


def stop_record(cause: str, message: str, eviction: Eviction, node: str | None = None) -> FailureRecord:
    """The entry of a stop of the whole job it did not ask for, once its pods were deleted:
    when, why (a queue's or the node's words; a preemption names its preemptor's uid) and
    what it cost, as status.eviction settled it. `node`: the node it was moved off, if one."""
    return FailureRecord(time=eviction.stop_time, cause=cause, node=node, message=message[:1024] or None,
                         resumed_from_step=eviction.resume_from_step, steps_lost=eviction.steps_lost)


def price_stop(history: Iterable[FailureRecord] | None, eviction: Eviction | None,
               also: Collection[str] = ()) -> list[FailureRecord] | None:
    """The history with the entry of `eviction`'s stop (the one recorded at its stop time,
    of a cause of STOPS or `also`) priced again: the pods' final reports come in after they
    are deleted."""
    kept = list(history or ())
    if eviction is None or eviction.stop_time is None:
        return kept or None
    priced = STOPS | frozenset(also)
    return [dataclasses.replace(f, resumed_from_step=eviction.resume_from_step, steps_lost=eviction.steps_lost)
            if f.pod is None and f.time == eviction.stop_time and f.cause in priced else f for f in kept] or None


def add_failure(history: Iterable[FailureRecord] | None, entry: FailureRecord) -> list[FailureRecord]:
    """The history with one more entry, bounded."""
    return [*(history or ()), entry][-HISTORY_LIMIT:]


# Failures that may be the node's doing (a bad GPU, memory errors, a flaky kubelet): the
# cluster's own decisions (Evicted, Preempted) and pods that never ran do not count.
NODE_FAULTS = frozenset({EXIT_CODE, OOM_KILLED, NODE_LOST, HUNG})
AVOIDED_LIMIT = 16  # status.avoidedNodes' maxItems


def nodes_to_avoid(history: Iterable[FailureRecord], avoided: Iterable[AvoidedNode], threshold: int,
                   stamp: str) -> tuple[list[AvoidedNode], list[AvoidedNode]]:
    """(avoidedNodes with the nodes that now reach `threshold` failures of the job added,
    and those its workers were moved off as unhealthy, at once; the new entries). A node
    once avoided, lifted or not, is never added again; 0 avoids nothing."""
    kept = list(avoided)
    if threshold <= 0:
        return kept, []
    history = list(history)
    counts = Counter(f.node for f in history if f.node and f.cause in NODE_FAULTS)
    unhealthy = {f.node for f in history if f.node and f.cause in MOVED_OFF}
    known = {a.node for a in kept}
    new = [AvoidedNode(node=node, time=stamp, failures=counts.get(node, 0))
           for node in sorted(set(counts) | unhealthy)
           if (counts.get(node, 0) >= threshold or node in unhealthy) and node not in known]
    return _bounded(kept + new), new


def _bounded(entries: list[AvoidedNode]) -> list[AvoidedNode]:
    """At most AVOIDED_LIMIT entries: lifted ones go first, the oldest first."""
    while len(entries) > AVOIDED_LIMIT:
        lifted = [a for a in entries if a.lifted_time]
        entries.remove(lifted[0] if lifted else entries[0])
    return entries


def avoiding(avoided: Iterable[AvoidedNode] | None) -> tuple[str, ...]:
    """The nodes new workers must stay off now."""
    return tuple(sorted(a.node for a in avoided or () if a.node and not a.lifted_time))


def lift_avoidance(avoided: Iterable[AvoidedNode], stamp: str, why: str) -> list[AvoidedNode]:
    """Stop avoiding every node still avoided (a worker fits nowhere else), saying why."""
    return [AvoidedNode(node=a.node, time=a.time, failures=a.failures, lifted_time=stamp, message=why[:1024])
            if not a.lifted_time else a for a in avoided]
