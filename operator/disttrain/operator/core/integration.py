"""The pure half of an integration: what `decide` asks a controller we cooperate with.

A pass's `JobState.joined` holds one `Joined` per integration the job takes part in (a
quota queue, a scheduler's queue ...), made by that integration's shell (`observe`, in
disttrain/integrations/protocol.py) from what it watches. `decide` knows only these hooks,
in the order of a job's life, never an integration's name:

  hold       before the job may run: keep it waiting (return the plan) or let it go (None);
             `nodes` is the cluster's nodes as the operator watches them
  sized      the size it may run at (an admission smaller than `nodes`)
  suspended  the user suspended the job: what the integration's objects must do
  tell       after the pass: steps that bring the integration's objects up to date
  lost_to    the cause a job's waiting time is lost to (goodput), if any
  unhealthy  nodes the job's workers should leave, with why (a sick device they hold there)

Each hook adds to the Plan: conditions and Events as every stage does, and `Step`s, small
typed requests that the integration's own shell carries out (`Integration.carry_out`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from disttrain.operator.core.nodes import NodeHealth  # what `hold` sees of the nodes (part of the seam)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from disttrain.api.report import TrainerReport
    from disttrain.operator.core.pods import PodInfo
    from disttrain.operator.core.state import JobState, Plan, Refusal


__all__ = ["Joined", "NodeHealth", "Step"]


@dataclass(frozen=True, slots=True)
class Step:
    """One thing a pass asks an integration's shell to do; `integration` names whose."""

    integration: ClassVar[str] = ""
    creates: ClassVar[bool] = False  # a creation the API may refuse (its refusal is said on the job)


class Joined:
    """A job's part in one integration, as this pass sees it. Every hook does nothing by
    default: an integration overrides the ones its controller needs."""

    __slots__ = ()
    integration: ClassVar[str] = ""

    def hold(self, job: JobState, pods: list[PodInfo], plan: Plan, *, report: TrainerReport | None,
             checkpoint_refused: str | None, refusal: Refusal | None,
             nodes: Mapping[str, NodeHealth] | None = None) -> Plan | None:
        return None

    def sized(self, job: JobState) -> JobState:
        return job

    def suspended(self, job: JobState, pods: list[PodInfo], plan: Plan) -> None:
        return None

    def tell(self, job: JobState, pods: list[PodInfo], plan: Plan) -> None:
        return None

    def lost_to(self, job: JobState) -> str | None:
        return None

    def unhealthy(self, job: JobState, pods: list[PodInfo]) -> dict[str, str]:
        """Nodes of the job's workers that are unhealthy for it, with why (a device a worker
        holds there is tainted): the job moves off them as off a node whose conditions say so."""
        return {}
