"""Sick devices from DRA device taints (pure): a worker whose claim holds a device with a
NoSchedule or NoExecute taint (a driver's, in its ResourceSlice, or a DeviceTaintRule's)
moves off that node, checkpoint first, as off a node whose conditions say it is unhealthy.

Kubernetes evicts a pod whose device gets an untolerated NoExecute taint at once (its
device-taint eviction controller). The claim template tolerates NoExecute taints for the
job's evictGraceSeconds and a margin (claim.py), so the operator moves the workers first, a
checkpoint in hand; the node is then avoided by the new workers, which keeps them off the
device (a tolerated taint does not stop the allocator from handing it out again).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from disttrain.operator.core.integration import Joined

Device = tuple[str, str, str]  # (driver, pool, device)
EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def _taint(raw: Mapping[str, Any]) -> Taint | None:
    effect = str(raw.get("effect") or "")
    return Taint(str(raw.get("key") or ""), str(raw.get("value") or ""), effect) if effect in EFFECTS else None


def slice_taints(body: Mapping[str, Any]) -> dict[Device, tuple[Taint, ...]]:
    """The tainted devices a ResourceSlice publishes (its driver's own taints)."""
    spec = body.get("spec") or {}
    driver, pool = str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or "")
    out = {}
    for device in spec.get("devices") or []:
        taints = tuple(t for t in (_taint(raw) for raw in device.get("taints") or []) if t is not None)
        if taints:
            out[(driver, pool, str(device.get("name") or ""))] = taints
    return out


@dataclass(frozen=True, slots=True)
class Rule:
    """A DeviceTaintRule: the devices it selects (None: any) and its taint."""

    driver: str | None
    pool: str | None
    device: str | None
    taint: Taint

    def selects(self, device: Device) -> bool:
        return all(want is None or want == have for want, have in zip((self.driver, self.pool, self.device), device))


def rule_of(body: Mapping[str, Any]) -> Rule | None:
    spec = body.get("spec") or {}
    taint = _taint(spec.get("taint") or {})
    if taint is None:
        return None
    chosen = spec.get("deviceSelector") or {}
    return Rule(chosen.get("driver"), chosen.get("pool"), chosen.get("device"), taint)


def allocated(claim: Mapping[str, Any]) -> tuple[str | None, tuple[Device, ...]]:
    """(the pod that owns the claim, the devices allocated to it)."""
    owner = next((o.get("name") for o in (claim.get("metadata") or {}).get("ownerReferences") or []
                  if o.get("kind") == "Pod"), None)
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return owner, tuple((str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
                        for r in results)


def sick_workers(claims: Iterable[tuple[str | None, tuple[Device, ...]]],
                 tainted: Mapping[Device, tuple[Taint, ...]], rules: Iterable[Rule]) -> dict[str, str]:
    """Pod name -> why, for each worker holding a tainted device."""
    rules = list(rules)
    out: dict[str, str] = {}
    for pod, devices in claims:
        for device in devices:
            taints = [*tainted.get(device, ()), *(r.taint for r in rules if r.selects(device))]
            if pod and taints:
                out[pod] = (f"device {'/'.join(device)} tainted {', '.join(str(t) for t in taints)}"
                            + (f"; {out[pod]}" if pod in out else ""))
    return out


@dataclass(frozen=True, slots=True)
class Claimed(Joined):
    """A job whose workers hold DRA devices, with those that hold a tainted one."""

    integration: ClassVar[str] = "dynamic_resources"
    sick: Mapping[str, str]  # pod name -> why

    def unhealthy(self, job: Any, pods: list[Any]) -> dict[str, str]:
        return {p.node: self.sick[p.name] for p in pods if p.active and p.node and p.name in self.sick}
