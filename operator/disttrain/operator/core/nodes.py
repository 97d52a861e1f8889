"""What the operator needs to know about a node that holds workers, read from its
manifest (pure): is it lost, and since when.

A node is lost when its Ready condition is not True (False: the kubelet says it is
unhealthy; Unknown: the kubelet stopped posting status, as the node lifecycle controller
marks it), or when it carries the NoExecute taint node.kubernetes.io/unreachable or
not-ready. Its pods stay `Running` in the API meanwhile: without this, a job would wait
for the taint manager's 300 s toleration while its other ranks hang in a collective.

A node is cordoned (spec.unschedulable: `kubectl cordon`, the first step of `kubectl
drain`) while it still works: its workers are moved checkpoint first (stopping.drain).

A node is unhealthy while it is Ready but says it should not run training (NodeRules): a
condition that node-problem-detector or a GPU health check sets, a NoSchedule/NoExecute
taint a GPU health controller puts on it, or fewer of the job's GPUs allocatable than its
workers there were given (a GPU fell off the bus and the device plugin stopped offering
it). Its workers are moved off it, checkpoint first (stopping.move_off_unhealthy).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

from disttrain.api.quantity import parse_quantity
from disttrain.api.times import parse_time

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
LOST_TAINTS = frozenset({"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"})


@dataclass(frozen=True, slots=True)
class NodeHealth:
    name: str
    ready: str  # the Ready condition's status: True | False | Unknown ("" before it has one)
    ready_since: str | None  # when that status began (lastTransitionTime)
    ready_reason: str  # e.g. NodeStatusUnknown, KubeletNotReady
    tainted_since: str | None  # the earliest unreachable/not-ready NoExecute taint's timeAdded
    tainted: str  # that taint's key ("" if none)
    cordoned: bool = False  # spec.unschedulable: being drained, or about to be
    # (type, status, reason, message) of its other conditions, heartbeat times left out
    conditions: tuple[tuple[str, str, str, str], ...] = ()
    taints: tuple[tuple[str, str], ...] = ()  # (key, effect) of its NoSchedule/NoExecute taints
    allocatable: tuple[tuple[str, str], ...] = ()  # (name, quantity) of its extended resources
    labels: tuple[tuple[str, str], ...] = ()  # its labels: its domain at each topology level (block, rack)

    def watched(self, rules: NodeRules) -> tuple[tuple[tuple[str, str, str, str], ...], tuple[tuple[str, str], ...]]:
        """(its conditions, its taints) that `rules` count against it."""
        return (tuple(c for c in self.conditions if (c[0], c[1]) in rules.conditions),
                tuple(t for t in self.taints if t[0] in rules.taints))

    def unhealthy(self, rules: NodeRules, gpu_resource: str | None = None, gpus_given: int = 0) -> str | None:
        """Why a Ready node should not run training, in the cluster's words; None while it
        is healthy. `gpus_given`: how many `gpu_resource` the job's workers there requested."""
        conditions, taints = self.watched(rules)
        why = [f"condition {kind}={status}" + (f" ({reason}: {message})" if reason and message else
                                                f" ({reason or message})" if reason or message else "")
               for kind, status, reason, message in conditions]
        why += [f"taint {key}:{effect}" for key, effect in taints]
        offered = dict(self.allocatable).get(gpu_resource or "")
        # A resource the node does not list at all is not judged (its status is not in yet);
        # a device plugin that loses a GPU lowers the count, to 0 when it stops.
        if offered is not None and gpus_given > 0:
            count = _count(offered)
            if count < gpus_given:
                why.append(f"{count} {gpu_resource} allocatable where its workers were given {gpus_given}")
        return "; ".join(why) or None

    def lost_since(self) -> datetime | None:
        """When the node stopped being usable for training, or None while it is. A status
        without a time (no real node has one) counts as long ago."""
        moments = ([parse_time(self.ready_since) or EPOCH] if self.ready in ("False", "Unknown") else []) + \
                  ([parse_time(self.tainted_since) or EPOCH] if self.tainted else [])
        return min(moments) if moments else None

    def describe(self) -> str:
        """Why it is lost, in the cluster's words, for messages."""
        parts = []
        if self.ready in ("False", "Unknown"):
            why = f" ({self.ready_reason})" if self.ready_reason else ""
            parts.append(f"Ready={self.ready}{why} since {self.ready_since or 'an unknown time'}")
        if self.tainted:
            parts.append(f"tainted {self.tainted}:NoExecute since {self.tainted_since or 'an unknown time'}")
        return f"node {self.name} " + (" and ".join(parts) or "is Ready")


def _count(quantity: str) -> int:
    try:
        return int(parse_quantity(quantity))
    except (ValueError, TypeError):
        return 0


def summarize_node(node: Mapping[str, Any]) -> NodeHealth:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    ready = next((c for c in conditions if c.get("type") == "Ready"), {})
    taints = [t for t in spec.get("taints") or [] if isinstance(t, dict) and t.get("effect") in ("NoSchedule", "NoExecute")]
    lost = sorted((t for t in taints if t.get("key") in LOST_TAINTS and t.get("effect") == "NoExecute"),
                  key=lambda t: t.get("timeAdded") or "")
    return NodeHealth(name=meta.get("name", ""), ready=str(ready.get("status") or ""),
                      ready_since=ready.get("lastTransitionTime"), ready_reason=str(ready.get("reason") or ""),
                      tainted_since=lost[0].get("timeAdded") if lost else None,
                      tainted=lost[0].get("key", "") if lost else "",
                      cordoned=spec.get("unschedulable") is True,
                      conditions=tuple((str(c.get("type") or ""), str(c.get("status") or ""), str(c.get("reason") or ""),
                                        str(c.get("message") or "")[:300]) for c in conditions if c.get("type") != "Ready"),
                      taints=tuple(sorted({(str(t.get("key") or ""), str(t["effect"])) for t in taints})),
                      allocatable=tuple(sorted((str(k), str(v)) for k, v in (status.get("allocatable") or {}).items()
                                               if "/" in str(k))),
                      labels=tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items())))


# node-problem-detector's kernel monitor, and GKE's GPU device plugin (an XID error that
# needs a reset); the chart's nodeHealth.conditions changes the list.
DEFAULT_UNHEALTHY_CONDITIONS = "KernelDeadlock=True,ReadonlyFilesystem=True,XidCriticalError=True"


@dataclass(frozen=True, slots=True)
class NodeRules:
    """Which signals of a Ready node make it unhealthy for training: conditions as
    (type, status), and taint keys (NoSchedule or NoExecute)."""

    conditions: frozenset[tuple[str, str]] = frozenset()
    taints: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, conditions: str, taints: str) -> NodeRules:
        """From DISTTRAIN_UNHEALTHY_NODE_CONDITIONS (TYPE=STATUS,...) and
        DISTTRAIN_UNHEALTHY_NODE_TAINTS (KEY,...); `none` is an empty list (an empty variable
        is the default). A malformed entry raises ValueError naming it."""
        pairs = set()
        for entry in filter(None, (e.strip() for e in conditions.split(",") if e.strip() != "none")):
            kind, equals, status = entry.partition("=")
            if not equals or not kind.strip() or status.strip() not in ("True", "False", "Unknown"):
                raise ValueError(
                    f"DISTTRAIN_UNHEALTHY_NODE_CONDITIONS: {entry!r} is not TYPE=STATUS with STATUS True, False or "
                    f"Unknown: write e.g. KernelDeadlock=True (the chart's nodeHealth.conditions)")
            if kind.strip() == "Ready":
                raise ValueError("DISTTRAIN_UNHEALTHY_NODE_CONDITIONS: Ready is the lost-node rule's "
                                 "(failurePolicy.nodeLostSeconds): leave it out of this list")
            pairs.add((kind.strip(), status.strip()))
        keys = set()
        for key in filter(None, (k.strip() for k in taints.split(",") if k.strip() != "none")):
            if "=" in key or ":" in key or " " in key:
                raise ValueError(f"DISTTRAIN_UNHEALTHY_NODE_TAINTS: {key!r} is not a taint key: give the key "
                                 "alone, e.g. nvidia.com/gpu.unhealthy (any NoSchedule or NoExecute effect counts)")
            keys.add(key)
        return cls(conditions=frozenset(pairs), taints=frozenset(keys))
