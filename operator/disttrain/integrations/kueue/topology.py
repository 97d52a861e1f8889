"""Kueue's Topology-Aware Scheduling (TAS) for a job's workers (pure).

A job with spec.scheduling.topology asks Kueue to keep its workers inside domains of the
cluster's Topology (node-label levels: block, rack, host). Kueue's protocol for a
Workload it did not make itself (v0.19):

  1. the Workload's podSet carries a topologyRequest: `required` or `preferred` (a level's
     label), optional slices (`podSetSliceRequiredTopology` + `podSetSliceSize`), and
     `podIndexLabel`, our worker-index label, so that Kueue places the workers by rank:
     workers 0..k-1 in the first domain, the next in the second (neighbours in the ring
     stay neighbours);
  2. Kueue admits it with a topologyAssignment: the domains (their level values) and how
     many workers each takes;
  3. every worker is created with the scheduling gate kueue.x-k8s.io/topology, the podset
     label, the Workload's name and the request as annotations; Kueue's TopologyUngater
     finds them by those, adds each one's domain to its nodeSelector and lifts the gate;
  4. a worker re-created after a failure gets the same gate: Kueue puts it in a free slot of
     the assignment, which, when Kueue replaced a failed node, is a host in the same
     required domain (its failed-node replacement needs kubernetes.io/hostname as the
     Topology's lowest level).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, Mapping

from disttrain.api import types as t
from disttrain.api.names import INDEX_LABEL

GROUP = "kueue.x-k8s.io"
GATE = f"{GROUP}/topology"  # the scheduling gate Kueue's TopologyUngater lifts
PODSET_LABEL = f"{GROUP}/podset"
WORKLOAD_ANNOTATION = f"{GROUP}/workload"
# The request, on each pod: without one of these Kueue neither wakes its ungater for the pod
# nor leaves it out of the capacity it counts as used by pods it did not place.
REQUIRED_ANNOTATION = f"{GROUP}/podset-required-topology"
PREFERRED_ANNOTATION = f"{GROUP}/podset-preferred-topology"
SLICE_REQUIRED_ANNOTATION = f"{GROUP}/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = f"{GROUP}/podset-slice-size"
UNCONSTRAINED_ANNOTATION = f"{GROUP}/podset-unconstrained-topology"
HOSTNAME = "kubernetes.io/hostname"


def request(topo: t.Topology) -> dict[str, Any]:
    """The podSet's topologyRequest."""
    out: dict[str, Any] = {"podIndexLabel": INDEX_LABEL}
    if topo.required:
        out["required"] = topo.required
    elif topo.preferred:
        out["preferred"] = topo.preferred
    if topo.slice_required and topo.slice_size:
        out |= {"podSetSliceRequiredTopology": topo.slice_required, "podSetSliceSize": topo.slice_size}
    return out


def pod_annotations(asked: Mapping[str, Any] | None, workload: str) -> dict[str, str]:
    """What each worker placed by TAS carries for Kueue's ungater: its Workload and the
    request its Workload made (`asked`, the podSet's topologyRequest); unconstrained when it
    asked none and its ClusterQueue has only TAS flavors, where Kueue places every podSet by
    topology."""
    out = {WORKLOAD_ANNOTATION: workload}
    asked = asked or {}
    if asked.get("required"):
        out[REQUIRED_ANNOTATION] = str(asked["required"])
    elif asked.get("preferred"):
        out[PREFERRED_ANNOTATION] = str(asked["preferred"])
    elif not asked.get("podSetSliceRequiredTopology"):
        out[UNCONSTRAINED_ANNOTATION] = "true"
    if asked.get("podSetSliceRequiredTopology") and asked.get("podSetSliceSize"):
        out |= {SLICE_REQUIRED_ANNOTATION: str(asked["podSetSliceRequiredTopology"]),
                SLICE_SIZE_ANNOTATION: str(asked["podSetSliceSize"])}
    return out


@dataclass(frozen=True, slots=True)
class Domain:
    """One domain of an assignment: its value at each level, and the workers it takes."""

    values: tuple[str, ...]
    workers: int


@dataclass(frozen=True, slots=True)
class Assignment:
    """A podSet's topologyAssignment, decoded: the levels (highest first) and the domains
    in Kueue's order (the order ranks fill them)."""

    levels: tuple[str, ...]
    domains: tuple[Domain, ...]


def decode(raw: Mapping[str, Any] | None) -> Assignment | None:
    """Kueue v0.19's compact topologyAssignment (slices of domains, each level's values
    universal or individual prefix+root+suffix, pod counts universal or individual)."""
    if not isinstance(raw, Mapping) or not raw.get("levels"):
        return None
    levels = tuple(str(level) for level in raw.get("levels") or [])
    domains: list[Domain] = []
    for part in raw.get("slices") or []:
        count = int(part.get("domainCount") or 0)
        values = [_values(level, count) for level in part.get("valuesPerLevel") or []]
        pods = _counts(part.get("podCounts") or {}, count)
        domains += [Domain(values=tuple(v[i] for v in values), workers=pods[i]) for i in range(count)]
    return Assignment(levels=levels, domains=tuple(domains))


def _values(level: Mapping[str, Any], count: int) -> list[str]:
    if level.get("universal") is not None:
        return [str(level["universal"])] * count
    each = level.get("individual") or {}
    prefix, suffix = each.get("prefix") or "", each.get("suffix") or ""
    roots = list(each.get("roots") or [])
    return [f"{prefix}{root}{suffix}" for root in roots] + [""] * (count - len(roots))


def _counts(counts: Mapping[str, Any], count: int) -> list[int]:
    if counts.get("universal") is not None:
        return [int(counts["universal"])] * count
    each = [int(n) for n in counts.get("individual") or []]
    return each + [0] * (count - len(each))


def asked_level(asked: Mapping[str, Any] | None) -> str | None:
    """The level a topologyRequest asks the workers to stay within."""
    asked = asked or {}
    return asked.get("required") or asked.get("preferred") or asked.get("podSetSliceRequiredTopology") or None


def at_level(assignment: Assignment, level: str | None,
             label_of: Callable[[str, str], str | None]) -> list[tuple[str, int]]:
    """The assignment's domains grouped at `level`, in Kueue's order: (the domain's value of
    that label, its workers). An assignment at kubernetes.io/hostname names hosts only:
    `label_of(host, level)`, the host's node label, gives the level ('?' for a node not known)."""
    out: dict[str, int] = {}
    index = assignment.levels.index(level) if level in assignment.levels else None
    for domain in assignment.domains:
        if index is not None:
            name = domain.values[index]
        elif level and assignment.levels and assignment.levels[-1] == HOSTNAME:
            name = label_of(domain.values[-1], level) or "?"
        else:
            name = "/".join(domain.values)
        out[name] = out.get(name, 0) + domain.workers
    return list(out.items())


def words(asked: Mapping[str, Any] | None, grouped: list[tuple[str, int]], level: str | None) -> str:
    """Where Kueue placed the workers, for the Admitted condition."""
    asked = asked or {}
    how = ("required" if asked.get("required") else "preferred" if asked.get("preferred")
           else f"slices of {asked.get('podSetSliceSize')}" if asked.get("podSetSliceRequiredTopology")
           else "implied by the ClusterQueue's TAS flavors")
    shown = ", ".join(f"{name} ({n})" for name, n in grouped[:8]) + (" ..." if len(grouped) > 8 else "")
    spread = (f"; it did not fit one {level}, so Kueue spread it over {len(grouped)}"
              if asked.get("preferred") and len(grouped) > 1 else "")
    return (f"placed by Kueue's Topology-Aware Scheduling ({how} {level or 'any domain'}) in {len(grouped)} "
            f"domain(s): {shown}{spread}")
