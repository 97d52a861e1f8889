"""What a pass decides of a gang-scheduled job (the pure half, operator/core/integration.py):
it says which scheduler places the gang when its workers are created, and a job for
kube-scheduler's own gang waits where the cluster does not serve its PodGroup: Pending, no
worker, the fix on the job. Created anyway, its workers would lose the PodGroup field (the
API server drops it while the GenericWorkload gate is off) and be placed one by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from disttrain.api import conditions as c
from disttrain.api.report import TrainerReport
from disttrain.integrations.gang.pod_group import API_VERSION, SCHEDULER_WORDS, VOLCANO_SCHEDULER, Mechanism, mechanism
from disttrain.operator.core.integration import Joined
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.state import Event, JobState, Plan, Refusal, workers

NAME = "gang"
# How soon a held job looks again: enabling the gate restarts the control plane, which no watch shows.
RECHECK = timedelta(seconds=60)
NOT_SERVED = ("the cluster does not serve scheduling.k8s.io/v1beta1 PodGroups: start kube-apiserver with "
              "--feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1beta1=true, and "
              "kube-scheduler and kube-controller-manager with --feature-gates=GenericWorkload=true "
              "(Kubernetes 1.37+), or set spec.scheduling.schedulerName to a scheduler that reads PodGroups "
              "(one running the coscheduling plugin, or volcano), or run the operator with "
              "DISTTRAIN_GANG_FALLBACK naming one")


@dataclass(frozen=True, slots=True)
class InGang(Joined):
    """A job that asks for a gang; native_served: whether the API serves kube-scheduler's
    PodGroups (None: not looked up, the job's gang is another scheduler's)."""

    integration: ClassVar[str] = NAME
    native_served: bool | None = None
    fallback: str | None = None  # the scheduler a native gang goes to where it is not served

    @property
    def falls_back(self) -> bool:
        return self.native_served is False and bool(self.fallback)

    def hold(self, job: JobState, pods: list[PodInfo], plan: Plan, *, report: TrainerReport | None,
             checkpoint_refused: str | None, refusal: Refusal | None,
             nodes: Mapping[str, Any] | None = None) -> Plan | None:
        if self.native_served is not False or _mechanism(job) != "native" or self.falls_back:
            return None
        if any(p.active for p in pods):  # placed before the API went: they keep running
            return None
        return not_served(job, pods, plan)

    def tell(self, job: JobState, pods: list[PodInfo], plan: Plan) -> None:
        """When the first workers are created: which PodGroup and which scheduler place them."""
        kind = _mechanism(job)
        if kind is None or not plan.create or any(p.active for p in pods):
            return
        least = job.validation.resolved.min_nodes  # type: ignore[union-attr]
        why = ""
        if kind == "native" and self.falls_back:  # kube-scheduler's own is not served: the configured one
            kind, why = (("volcano" if self.fallback == VOLCANO_SCHEDULER else "coscheduling"),
                         f" (scheduler {self.fallback}, DISTTRAIN_GANG_FALLBACK: the cluster does not serve "
                         "kube-scheduler's own PodGroups)")
        plan.events.append(Event("Normal", c.GANG_SCHEDULING, f"the workers join PodGroup {job.name} "
                                 f"({API_VERSION[kind]}): {SCHEDULER_WORDS[kind]}{why} binds {least} or more of "
                                 "them at once, or none"))


def _mechanism(job: JobState) -> Mechanism | None:
    return mechanism(job.validation.job) if job.validation.job is not None else None


def not_served(job: JobState, pods: list[PodInfo], plan: Plan) -> Plan:
    """Pending, no worker, a Warning once, and a look again after RECHECK."""
    message = f"spec.scheduling.gang without schedulerName is placed by kube-scheduler itself, and {NOT_SERVED}"
    before = c.get_condition(job.status.conditions, c.RUNNING)
    if before is None or before.reason != c.GANG_NOT_SERVED or before.message != c.cap(message):
        plan.events.append(Event("Warning", c.GANG_NOT_SERVED, message))
    plan.condition(c.RUNNING, False, c.GANG_NOT_SERVED, message)
    plan.status.phase = "Pending"
    plan.status.workers = workers(pods, 0)
    plan.wake_at = plan.now + RECHECK
    return plan
