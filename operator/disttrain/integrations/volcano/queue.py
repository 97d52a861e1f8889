"""Volcano queues. A job labelled `scheduling.volcano.sh/queue-name: Q` that Volcano
gang-schedules (spec.scheduling.schedulerName: volcano, spec.scheduling.gang) has its
PodGroup in queue Q: Volcano admits a PodGroup within its queue's share (capability,
weight, reclaim), and one in a queue that does not exist is never scheduled, as Volcano
documents. Without a Volcano gang the label would do nothing: the job says so (a Warning
Event) and runs as it would without it. The queue is read when the PodGroup is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from disttrain.api import types as t
from disttrain.api.report import TrainerReport
from disttrain.integrations.gang.pod_group import VOLCANO, mechanism
from disttrain.integrations.protocol import Integration, Key, Shell
from disttrain.operator.core.integration import Joined, NodeHealth
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.core.state import Event, JobState, Plan, Refusal

QUEUE_LABEL = "scheduling.volcano.sh/queue-name"
IGNORED = "VolcanoQueueIgnored"  # the Event's reason


def queue_of(labels: dict[str, str] | None) -> str | None:
    value = (labels or {}).get(QUEUE_LABEL, "").strip()
    return value or None


def volcano_gang(job: t.Job) -> bool:
    return mechanism(job) == "volcano"


@dataclass(frozen=True, slots=True)
class InVolcanoQueue(Joined):
    """A job that names a Volcano queue: its gang goes there, or the label does nothing."""

    integration: ClassVar[str] = "volcano"
    queue: str

    def hold(self, job: JobState, pods: list[PodInfo], plan: Plan, *, report: TrainerReport | None,
             checkpoint_refused: str | None, refusal: Refusal | None,
             nodes: Mapping[str, NodeHealth] | None = None) -> Plan | None:
        if not volcano_gang(job.validation.job):
            plan.events.append(Event("Warning", IGNORED, f"the label {QUEUE_LABEL}={self.queue} is ignored: only a "
                                     "job that Volcano gang-schedules has a PodGroup to put in a queue; set "
                                     "spec.scheduling.schedulerName: volcano and spec.scheduling.gang, or remove "
                                     "the label"))
        return None


class VolcanoQueue(Integration):
    """The Volcano PodGroup of a labelled job names its queue."""

    name: ClassVar[str] = "volcano"

    async def observe(self, shell: Shell, key: Key, view: Any) -> Joined | None:
        queue = queue_of(view.labels)
        return InVolcanoQueue(queue=queue) if queue is not None else None

    def shape(self, children: list[dict], job: t.Job) -> list[dict]:
        queue = queue_of(job.labels)
        if queue is None or not volcano_gang(job):
            return children
        return [{**child, "spec": {**child.get("spec", {}), "queue": queue}}
                if child.get("apiVersion") == VOLCANO and child.get("kind") == "PodGroup" else child
                for child in children]
