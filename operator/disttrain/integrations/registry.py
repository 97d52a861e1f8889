"""Every integration the operator knows, one line each: adding one is its folder and a
line here (docs/architecture.md, "Integrations"). The order is the order a pass asks
them: a queue that holds a job comes before anything that shapes its children."""

from __future__ import annotations

from typing import Any

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.integrations.gang import Gang
from disttrain.integrations.kueue.shell import Kueue
from disttrain.integrations.protocol import Integration
from disttrain.integrations.volcano import VolcanoQueue
from disttrain.render import render_owned
from disttrain.render.network_policy import NetworkPolicySettings

REGISTRY: tuple[type[Integration], ...] = (
    Kueue,
    Gang,
    VolcanoQueue,
)


def integrations(settings: Any) -> tuple[Integration, ...]:
    """The integrations as the operator's settings configure them."""
    return tuple(kind.of(settings) for kind in REGISTRY)


def owned_children(job: t.Job, resolved: Resolved, network_policy: NetworkPolicySettings | None = None,
                   among: tuple[Integration, ...] | None = None) -> list[dict]:
    """What a job owns besides its pods, as the operator creates them (and `disttrain
    render` prints them): render_owned's objects, shaped by each integration."""
    children = render_owned(job, resolved, network_policy)
    for integration in among if among is not None else tuple(kind() for kind in REGISTRY):
        children = integration.shape(children, job)
    return children
