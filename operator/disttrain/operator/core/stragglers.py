"""Stragglers (pure): a worker whose compute is slow holds every rank at every collective,
so the whole job runs at its pace while its peers wait.

The trainer reports, for each of its newest report windows, every worker's compute time
per step (the part of a step no collective runs in: its peers' waiting is left out) and
its step time (workerTimes, docs/pod-contract.md). A worker is slow in a window when its
compute time is more than failurePolicy.stragglerRatio times the median of the other
workers' (and more than MIN_EXCESS_SECONDS over it: sub-millisecond jitter is noise); it
is a straggler when it was slow in each of the last stragglerWindows windows. Comparing
with the others' median, not the median of all, makes a pair work: of two workers, the
slow one is 2x the other, the fast one 0.5x.

failurePolicy.stragglers says what follows: Report (the Straggler condition, an Event, the
disttrain_job_straggler_ratio metric), Replace (also move the workers off its node,
checkpoint first: stopping.move with cause Straggler, and the node is avoided), Off.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from disttrain.api import conditions as c
from disttrain.api.report import TrainerReport, WorkerWindow
from disttrain.api.times import parse_time
from disttrain.operator.core.failures import STRAGGLER
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.state import Event, JobState, Plan

MIN_EXCESS_SECONDS = 0.001


@dataclass(frozen=True, slots=True)
class Straggler:
    worker: int  # the worker index (pod <job>-worker-<i>)
    ratio: float  # its compute time over the others' median, in the newest window
    windows: int  # slow windows in a row, ending with the newest
    step: int  # the newest window's last step


def ratios(window: WorkerWindow) -> dict[int, float]:
    """Each worker's compute time over the median of the other workers' in one window;
    empty with fewer than two workers or nothing measured."""
    compute = {t.worker: t.compute_seconds for t in window.times}
    out = {}
    for worker, seconds in compute.items():
        others = [s for w, s in compute.items() if w != worker]
        median = statistics.median(others) if others else 0.0
        if median > 0:
            out[worker] = seconds / median
    return out


def slow_in(window: WorkerWindow, ratio: float) -> set[int]:
    compute = {t.worker: t.compute_seconds for t in window.times}
    return {w for w, r in ratios(window).items()
            if r > ratio and compute[w] - compute[w] / r >= MIN_EXCESS_SECONDS}


def find(windows: tuple[WorkerWindow, ...], ratio: float, needed: int) -> list[Straggler]:
    """The workers slow in each of the newest `needed` windows, slowest first."""
    if len(windows) < needed or needed < 1:
        return []
    newest = windows[-needed:]
    slow = set.intersection(*(slow_in(w, ratio) for w in newest))
    last = ratios(newest[-1])
    found = [Straggler(worker=w, ratio=round(last[w], 2), windows=_streak(windows, w, ratio), step=newest[-1].step)
             for w in slow]
    return sorted(found, key=lambda s: (-s.ratio, s.worker))


def _streak(windows: tuple[WorkerWindow, ...], worker: int, ratio: float) -> int:
    count = 0
    for window in reversed(windows):
        if worker not in slow_in(window, ratio):
            break
        count += 1
    return count


def _stale(report: TrainerReport, plan: Plan) -> bool:
    """A report last updated before the workers were last replaced (a move, a failure)
    says nothing of the new ones: the operator keeps the furthest report until the new
    trainer passes its step."""
    st = plan.status
    moments = [st.eviction.stop_time if st.eviction is not None else None, *(f.time for f in st.failures or ())]
    updated = parse_time(report.last_update_time)
    replaced = max((t for t in map(parse_time, moments) if t is not None), default=None)
    return replaced is not None and (updated is None or updated <= replaced)


def worst_ratio(report: TrainerReport | None) -> float | None:
    """The highest compute ratio of the newest window (the metric): 1.0 is an even job."""
    if report is None or not report.worker_windows:
        return None
    found = ratios(report.worker_windows[-1])
    return round(max(found.values()), 3) if found else None


def describe(s: Straggler, pod: PodInfo, job_ratio: float, needed: int) -> str:
    return (f"{pod.name} on node {pod.node or '(none)'} takes {s.ratio:.2f}x the other workers' median compute time per step, over "
            f"stragglerRatio {job_ratio:g} for {s.windows} report windows in a row (through step {s.step}; "
            f"stragglerWindows {needed})")


def watch(job: JobState, pods: list[PodInfo], plan: Plan, report: TrainerReport | None) -> list[tuple[Straggler, PodInfo]]:
    """The Straggler condition (with an Event when a worker first becomes one) and the
    metric from the trainer's newest report; returns the stragglers to move off their node
    (failurePolicy.stragglers: Replace), with their pods."""
    policy = job.validation.job.spec.failure_policy
    if report is not None and _stale(report, plan):
        report = None
    plan.straggler_ratio = worst_ratio(report)
    if policy.stragglers == "Off" or report is None or report.outcome is not None:
        why = ("failurePolicy.stragglers is Off" if policy.stragglers == "Off" else
               "the trainer finished" if report is not None else "no report of the current workers' times yet")
        plan.condition(c.STRAGGLER, False, c.NO_STRAGGLER, why, only_if_present=True)
        return []
    needed, ratio = policy.straggler_windows or 1, policy.straggler_ratio or 1.3
    by_index = {p.index: p for p in pods if p.active and p.ready and p.index is not None}
    found = [(s, by_index[s.worker]) for s in find(report.worker_windows, ratio, needed) if s.worker in by_index]
    if not found:
        plan.condition(c.STRAGGLER, False, c.NO_STRAGGLER, f"no worker's compute time per step is over "
                       f"{ratio:g}x the others' median for {needed} windows in a row", only_if_present=True)
        return []
    s, pod = found[0]
    message = describe(s, pod, ratio, needed) + ": every rank waits for it at each collective"
    if policy.stragglers == "Replace":
        message += "; moving the workers off its node, checkpoint first"
    before = c.get_condition(plan.status.conditions, c.STRAGGLER)
    if before is None or before.status != "True" or not (before.message or "").startswith(f"{pod.name} "):
        plan.events.append(Event("Warning", c.STRAGGLER, message))
    plan.condition(c.STRAGGLER, True, c.SLOW_WORKER, message)
    return found if policy.stragglers == "Replace" else []


def record(found: list[tuple[Straggler, PodInfo]], ratio: float, needed: int) -> list[tuple[str, str, str | None]]:
    """The failure history's entries of a move off stragglers' nodes: one per node."""
    out, seen = [], set()
    for s, pod in found:
        if pod.node and pod.node not in seen:
            seen.add(pod.node)
            out.append((STRAGGLER, describe(s, pod, ratio, needed), pod.node))
    return out
