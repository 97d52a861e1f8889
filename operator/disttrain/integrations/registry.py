"""Every integration the operator knows, one line each: adding one is its folder and a
line here (docs/architecture.md, "Integrations"). The order is the order a pass asks
them: a queue that holds a job comes before anything that shapes its children."""

from __future__ import annotations

from typing import Any

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.integrations.dynamic_resources import DynamicResources
from disttrain.integrations.gang import Gang
from disttrain.integrations.kueue.shell import Kueue
from disttrain.integrations.protocol import Integration, dressed
from disttrain.integrations.volcano import VolcanoQueue
from disttrain.render import render_owned
from disttrain.render import render_pod as render_core_pod
from disttrain.render.network_policy import NetworkPolicySettings

REGISTRY: tuple[type[Integration], ...] = (
    Kueue,
    Gang,
    VolcanoQueue,
    DynamicResources,
)


def integrations(settings: Any) -> tuple[Integration, ...]:
    """The integrations as the operator's settings configure them."""
    return tuple(kind.of(settings) for kind in REGISTRY)


def queue_of(labels: dict[str, str] | None) -> str | None:
    """The queue that holds a job before any worker is created, if one does (`disttrain validate`)."""
    return next((queue for kind in REGISTRY if (queue := kind.queue_of(labels)) is not None), None)


def held(queue: str) -> str | None:
    """What `disttrain validate` says of a job held in `queue` (queue_of's)."""
    return next((words for kind in REGISTRY if (words := kind.held(queue)) is not None), None)


def _default(among: tuple[Integration, ...] | None) -> tuple[Integration, ...]:
    return among if among is not None else tuple(kind() for kind in REGISTRY)


def owned_children(job: t.Job, resolved: Resolved, network_policy: NetworkPolicySettings | None = None,
                   among: tuple[Integration, ...] | None = None) -> list[dict]:
    """What a job owns besides its pods, as the operator creates them (and `disttrain
    render` prints them): render_owned's objects, then each integration's `children`, all
    shaped by each integration."""
    among = _default(among)
    children = render_owned(job, resolved, network_policy)
    for integration in among:
        children += integration.children(job, resolved)
    for integration in among:
        children = integration.shape(children, job)
    return children


def render_pod(job: t.Job, resolved: Resolved, index: int, avoid_nodes: tuple[str, ...] = (), *,
               node_selector: dict[str, str] | None = None, tolerations: tuple[dict, ...] = (),
               among: tuple[Integration, ...] | None = None) -> dict:
    """Worker `index` as the operator creates it: disttrain.render's pod, dressed by each
    integration (a gang's PodGroup membership)."""
    pod = render_core_pod(job, resolved, index, avoid_nodes, node_selector=node_selector, tolerations=tolerations)
    return dressed(pod, job, _default(among))


def render_children(job: t.Job, resolved: Resolved, network_policy: NetworkPolicySettings | None = None,
                    among: tuple[Integration, ...] | None = None) -> list[dict]:
    """Everything a job owns, as the operator creates it: owned_children, then one pod per
    desired node."""
    among = _default(among)
    return [*owned_children(job, resolved, network_policy, among),
            *(render_pod(job, resolved, i, among=among) for i in range(resolved.nodes))]
