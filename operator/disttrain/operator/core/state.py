"""What a pass of `plan.decide` reads (the job, the operator-wide Policy, the API's last
Refusal) and the Plan it builds, with the steps every stage shares: the worker counts
and the conditions of trouble the operator reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from disttrain.api import conditions as c
from disttrain.api.errors import GuardrailWarning
from disttrain.api.times import iso
from disttrain.api.status_types import DistributedTrainingStatus as Status
from disttrain.api.status_types import FailureRecord, TemplateStatus, Workers
from disttrain.api.validate import Validation
from disttrain.operator.core.integration import Joined, Step
from disttrain.operator.core.nodes import DEFAULT_UNHEALTHY_CONDITIONS, NodeRules
from disttrain.operator.core.pods import PodInfo


# Subsets of api.types.Phase: a job that holds (or waits for) workers; one whose workers
# train, so its trainer is polled and its checkpoint ages; one that has ended.
ACTIVE_PHASES = ("Pending", "Running", "Restarting")


TRAINING_PHASES = ("Running", "Restarting")


TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Policy:
    """Operator-wide knobs (settings.py reads them from the environment)."""

    backoff_base_seconds: float = 10.0
    backoff_max_seconds: float = 300.0
    node_rules: NodeRules = NodeRules.parse(DEFAULT_UNHEALTHY_CONDITIONS, "")  # what makes a Ready node unhealthy


@dataclass(frozen=True, slots=True)
class JobState:
    """What decide() needs to know about the DistributedTraining object itself."""

    name: str
    namespace: str
    generation: int | None
    status: Status
    validation: Validation
    joined: tuple[Joined, ...] = ()  # its part in each integration it takes part in (integration.py)
    template: TemplateStatus | None = None  # the training template it keeps (status.template)

    def joined_to(self, integration: str) -> Joined | None:
        return next((j for j in self.joined if j.integration == integration), None)


@dataclass(frozen=True, slots=True)
class Refusal:
    """The API refused to create a pod (403 admission/quota, 422 invalid): its answer."""

    pod: str
    code: int
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(slots=True)
class Plan:
    status: Status
    now: datetime
    generation: int | None = None  # the spec generation the conditions describe
    create: list[int] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (pod name, reason)
    create_service: bool = False
    events: list[Event] = field(default_factory=list)
    delete_job: bool = False
    # For metrics: what happened in this pass.
    new_warnings: list[GuardrailWarning] = field(default_factory=list)
    restarted: int = 0
    failed_reason: str | None = None
    became_running: bool = False
    checkpoint_age: float | None = None  # seconds since the newest checkpoint was made
    straggler_ratio: float | None = None  # the slowest worker's compute over the others' median (stragglers.py)
    new_failures: list[FailureRecord] = field(default_factory=list)  # added to status.failures now
    lost_seconds: dict[str, float] = field(default_factory=dict)  # worker-seconds lost in this pass, by cause
    # Checkpoint-then-evict (eviction.py): ask the trainer for a checkpoint and a hold of
    # this many seconds, waiting up to the second number for it (None: do not ask).
    ask_checkpoint: tuple[int, float] | None = None
    # What the integrations' shells are asked to do (integration.py), in the order asked.
    steps: list[Step] = field(default_factory=list)
    # When to look again even if nothing happens (a back-off ends, a deadline or TTL runs out).
    wake_at: datetime | None = None

    @property
    def stamp(self) -> str:
        """This pass's moment as status writes it."""
        return iso(self.now)

    def condition(self, type_: str, value: bool, reason: str, message: str, *,
                  only_if_present: bool = False) -> None:
        """Set a condition of the new status; with only_if_present a False condition is
        added only if it existed."""
        conds = self.status.conditions or []
        if only_if_present and not value and c.get_condition(conds, type_) is None:
            return
        self.status.conditions = c.set_condition(conds, type_, value, reason, message, self.generation, self.stamp)


def creation_refused(plan: Plan, refusal: Refusal | None) -> None:
    """PodCreationForbidden carries the API's own words (admission, quota, validation)."""
    if refusal is not None:
        message = (f"creating {refusal.pod} was refused ({refusal.code} {refusal.reason}): {refusal.message}")
        set_reported(plan, c.POD_CREATION_FORBIDDEN, True, refusal.reason or c.CREATION_REFUSED, message)
    else:
        set_reported(plan, c.POD_CREATION_FORBIDDEN, False, c.CREATION_ALLOWED, "worker pods are being created")


def set_reported(plan: Plan, type_: str, value: bool, reason: str, message: str) -> None:
    """A trouble condition, with one Warning Event when it first appears or its message
    changes (never one per pass); cleared quietly, and only where it had been set."""
    before = c.get_condition(plan.status.conditions, type_)
    if value and (before is None or before.status != "True" or before.message != c.cap(message)):
        plan.events.append(Event("Warning", reason, message))
    plan.condition(type_, value, reason, message, only_if_present=not value)


def workers(pods: list[PodInfo], desired: int, running: int | None = None) -> Workers:
    """The worker counts; `running`: the pods the Running condition counts, when a pass
    leaves some out (those it deletes)."""
    return Workers(desired=desired, active=sum(p.active for p in pods),
                   running=sum(p.active and p.phase == "Running" for p in pods) if running is None else running,
                   ready=sum(p.active and p.ready for p in pods), succeeded=sum(p.succeeded for p in pods),
                   failed=sum(p.failed for p in pods))
