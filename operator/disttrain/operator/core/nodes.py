"""What the operator needs to know about a node that holds workers, read from its
manifest (pure): is it lost, and since when.

A node is lost when its Ready condition is not True (False: the kubelet says it is
unhealthy; Unknown: the kubelet stopped posting status, as the node lifecycle controller
marks it), or when it carries the NoExecute taint node.kubernetes.io/unreachable or
not-ready. Its pods stay `Running` in the API meanwhile: without this, a job would wait
for the taint manager's 300 s toleration while its other ranks hang in a collective.

A node is cordoned (spec.unschedulable: `kubectl cordon`, the first step of `kubectl
drain`) while it still works: its workers are moved checkpoint first (stopping.drain).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

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


def summarize_node(node: Mapping[str, Any]) -> NodeHealth:
    meta = node.get("metadata") or {}
    ready = next((c for c in (node.get("status") or {}).get("conditions") or []
                  if isinstance(c, dict) and c.get("type") == "Ready"), {})
    taints = [t for t in (node.get("spec") or {}).get("taints") or []
              if isinstance(t, dict) and t.get("key") in LOST_TAINTS and t.get("effect") == "NoExecute"]
    taints.sort(key=lambda t: t.get("timeAdded") or "")
    return NodeHealth(name=meta.get("name", ""), ready=str(ready.get("status") or ""),
                      ready_since=ready.get("lastTransitionTime"), ready_reason=str(ready.get("reason") or ""),
                      tainted_since=taints[0].get("timeAdded") if taints else None,
                      tainted=taints[0].get("key", "") if taints else "",
                      cordoned=(node.get("spec") or {}).get("unschedulable") is True)
