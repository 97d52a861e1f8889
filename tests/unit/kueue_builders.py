"""Builders for the tests of the Kueue integration: a job's Workload (or growth slice) as
Kueue would hold it, its admission and eviction, the part of a job a pass sees, and what
a plan asks of the Workload."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from disttrain.api import load_job
from disttrain.integrations.kueue import workload as kueue
from disttrain.integrations.kueue.admission import (ActivateWorkload, CreateSlice, CreateWorkload, DeleteWorkload,
                                                    FinishWorkload, PublishCheckpoint, Queued, ReleaseWorkload,
                                                    SetPodsReady, ShrinkWorkload)
from disttrain.operator.core.state import JobState
from disttrain.render import render_pod, template_hash

from .helpers import job as job_doc
from .plan_builders import QUIET, at, iso, state

UID = "0b5c6a8e-1111-2222-3333-444455556666"
GPU = {"nodes": 2, "gpusPerNode": 4, **QUIET}
ELASTIC = {"nodes": 4, "minNodes": 2, "maxNodes": 4, **QUIET}


def workload(spec: dict, *, status: dict | None = None, labels: dict | None = None, priority=None,
             growth: kueue.Slice | None = None) -> dict:
    job, resolved, _ = load_job(job_doc(**spec))
    job = dataclasses.replace(job, uid=UID)
    body = kueue.render_workload(job, resolved, render_pod(job, resolved, 0), "team-a", priority,
                                 template_hash(job, resolved), growth)
    body["metadata"]["generation"] = 1
    body["status"] = status or {}
    return body


def admitted(count: int | None = None, flavor: str = "gpu-a") -> dict:
    assignment = {"name": "workers", "flavors": {"nvidia.com/gpu": flavor, "cpu": flavor}}
    if count is not None:
        assignment["count"] = count
    return {"admission": {"clusterQueue": "cq-team-a", "podSetAssignments": [assignment]},
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                            "message": "Quota reserved in ClusterQueue cq-team-a", "lastTransitionTime": iso(at(-60))},
                           {"type": "Admitted", "status": "True", "reason": "Admitted",
                            "message": "The workload is admitted", "lastTransitionTime": iso(at(-60))}]}


PENDING = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                           "message": "couldn't assign flavors to pod set workers: insufficient unused quota for "
                                      "nvidia.com/gpu in flavor gpu-a, 8 more needed",
                           "lastTransitionTime": iso(at(-5))}]}


def evicted(reason="Preempted", message="Preempted to accommodate a workload (UID: x) due to prioritization "
                                        "in the ClusterQueue") -> dict:
    status = admitted()
    status["conditions"].append({"type": "Evicted", "status": "True", "reason": reason, "message": message,
                                 "lastTransitionTime": iso(at(-1))})
    return status


def queued(spec: dict, status=None, wl: dict | None = None, cluster_queue: str | None = None,
           growth: dict | None = None, slices: int = 0) -> JobState:
    base = state(status, **spec)
    seen = Queued(queue="team-a", workload=kueue.view_of(wl) if wl is not None else None, cluster_queue=cluster_queue,
                  growth=kueue.view_of(growth) if growth is not None else None, slices=slices)
    return dataclasses.replace(base, joined=(seen,))


def asked(plan) -> SimpleNamespace:
    """What the plan asks of the Workload (its Kueue steps), one name each."""
    steps = {type(step): step for step in plan.steps if step.integration == "kueue"}
    finish, ready = steps.get(FinishWorkload), steps.get(SetPodsReady)
    published, active = steps.get(PublishCheckpoint), steps.get(ActivateWorkload)
    return SimpleNamespace(
        create_workload=CreateWorkload in steps, delete_workload=DeleteWorkload in steps,
        release_workload=ReleaseWorkload in steps,
        finish_workload=(finish.succeeded, finish.message) if finish else None,
        workload_pods_ready=(ready.ready, ready.reason) if ready else None,
        workload_checkpoint=(published.step, published.time) if published else None,
        workload_active=active.active if active else None,
        slice=steps.get(CreateSlice), shrink=steps.get(ShrinkWorkload),
        deleted=[step.name for step in plan.steps if isinstance(step, DeleteWorkload)])
