"""What the shell remembers about one job between passes: one `JobRecord` per job uid.

It holds only what the watch cannot tell yet or what the operator itself did: the
creations and deletions it asked for and has not seen (expectations, as Kubernetes' own
controllers keep), the status it last wrote and when, the names it found taken by
others, the API's last refusal, the trainer's newest report, the validated spec of the
current generation, the Events already posted. A record is dropped on the job's DELETED
event or when a read finds the job gone; a job deleted while no operator ran leaves
nothing behind, since records live only in memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from disttrain.api.names import worker_index
from disttrain.api.status_types import DistributedTrainingStatus
from disttrain.api.validate import Validation
from disttrain.operator.core.state import Refusal
from disttrain.operator.core.pods import PodInfo
from disttrain.api.report import TrainerReport

Key = tuple[str, str]  # (namespace, job name)

# How long a creation or deletion we asked for may stay unseen by the watch before we
# stop counting on it (the watch lost it, or someone undid it).
EXPECTATION_SECONDS = 30.0


@dataclass
class JobRecord:
    uid: str
    key: Key
    expected_creates: dict[str, tuple[float, str | None]] = field(default_factory=dict)  # name -> (deadline, hash)
    expected_deletes: dict[str, float] = field(default_factory=dict)  # pod uid -> deadline
    conflicts: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (kind, who holds it)
    refusal: Refusal | None = None
    refused_until: float = 0.0  # no creation is retried before this (monotonic clock)
    refusals: int = 0  # in a row: the retry back-off grows with it
    last_write: float = -1e9  # when status was last written (monotonic clock)
    last_status: DistributedTrainingStatus | None = None  # typed, as last written
    posted: set[tuple[str, str]] = field(default_factory=set)  # (reason, message) Events posted
    report: TrainerReport | None = None  # the trainer's newest /status
    silent_polls: int = 0  # /status polls in a row that got no report
    # (what it was validated for: generation and template, the result, the template it keeps)
    validation: tuple[Any, Validation, Any] | None = None
    resync_due: float = 0.0  # a pass after this moment first checks the job still exists
    creating: bool = False  # its children are being created in the background
    asked_checkpoint: str | None = None  # the eviction (its requestTime) a checkpoint was asked for
    checkpoint_refused: str | None = None  # why the trainer did not take that request (None: it did, or pending)
    pods_changed: float | None = None  # when the pod watch last told of a change of its pods (monotonic clock)

    def expect_create(self, name: str, template_hash: str | None, now: float) -> None:
        self.expected_creates[name] = (now + EXPECTATION_SECONDS, template_hash)

    def expect_delete(self, pod_uid: str, now: float) -> None:
        self.expected_deletes[pod_uid] = now + EXPECTATION_SECONDS

    def own_pods(self, observed: Iterable[PodInfo], now: float) -> tuple[list[PodInfo], list[PodInfo]]:
        """This job's pods (by owner uid), with what it asked for and the watch has not shown
        yet; and the pods that carry its label but belong to someone else."""
        observed = list(observed)
        own = [p for p in observed if p.owner_uid == self.uid]
        foreign = [p for p in observed if p.owner_uid != self.uid]
        names = {p.name for p in own}
        for name, (deadline, _hash) in list(self.expected_creates.items()):
            if name in names or deadline < now:
                del self.expected_creates[name]
        live_uids = {p.uid for p in own if not p.terminating}
        for pod_uid, deadline in list(self.expected_deletes.items()):
            if pod_uid not in live_uids or deadline < now:
                del self.expected_deletes[pod_uid]
        pods = [dataclasses.replace(p, terminating=True) if p.uid in self.expected_deletes else p for p in own]
        pods += [placeholder(name, template) for name, (_deadline, template) in self.expected_creates.items()]
        return pods, foreign


def placeholder(name: str, template: str | None) -> PodInfo:
    """A pod we created and the watch has not shown yet: Pending, of the template we sent,
    so nothing creates it twice nor takes it for an outdated one."""
    index = name.rsplit("-", 1)[-1]
    return PodInfo(name=name, index=int(index) if index.isdigit() else None, phase="Pending", ready=False,
                   terminating=False, disrupted=False, exit_code=None, reason="", template_hash=template, ip=None)


def foreign_conflicts(foreign: list[PodInfo], job: str) -> dict[str, str]:
    """Worker names of this job held by pods that are not its own."""
    return {p.name: f"pod {p.name} (owned by uid {p.owner_uid or 'nobody'})" for p in foreign
            if worker_index(p.name, job) is not None and not p.terminating}


def describe(kind: str, obj: dict) -> str:
    meta = obj.get("metadata") or {}
    owner = next((f"{r.get('kind')} {r.get('name')}" for r in meta.get("ownerReferences") or []), "no owner")
    return f"{kind.lower()} {meta.get('name')} ({owner})"


def moved(old: TrainerReport | None, new: TrainerReport) -> bool:
    """Did the trainer's report change in a way the job's status shows?"""
    if old is None:
        return True
    return ((old.step, old.checkpoint, old.outcome, old.loss, old.latest_eval(), old.held_at_step, old.worker_windows)
            != (new.step, new.checkpoint, new.outcome, new.loss, new.latest_eval(), new.held_at_step,
                new.worker_windows))
