"""kopf handlers: glue only. Read what kopf hands us, call the core, carry out the plan.

- `reconcile` (create / update / resume / a resync timer) -> plan.decide
- `refresh_progress` (timer) reads a ready trainer's /status -> status.progress/checkpoint
- `worker_pods` indexes our pods by (namespace, job), so no handler lists pods.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime, timezone
from typing import Any

import kopf

from . import conditions as c
from .api.names import JOB_LABEL
from .api.types import GROUP, PLURAL, VERSION, Job
from .api.validate import validate_document
from .kube import fetch_trainer_status
from .pods import summarize_pod
from .plan import JobState, decide, iso, parse_time, set_cond, status_patch
from .render import render_pod, render_service
from .render.network_policy import render_network_policy
from .settings import configure, env_float  # noqa: F401  (registers the startup handler)
from .status import (checkpoint_from_trainer, checkpoint_staleness, global_batch, progress_from_trainer,
                     status_sources)

RESYNC_SECONDS = env_float("DISTTRAIN_RESYNC_SECONDS", 5.0)
PROGRESS_SECONDS = env_float("DISTTRAIN_PROGRESS_SECONDS", 15.0)


@kopf.index("pods", labels={JOB_LABEL: kopf.PRESENT})
def worker_pods(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict:
    return {(namespace, labels[JOB_LABEL]): summarize_pod(body)}


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, worker_pods: kopf.Index,
              **_: Any) -> None:
    started = time.perf_counter()
    namespace, name = body.metadata.namespace, body.metadata.name
    with memo.locks[body.metadata.uid]:
        job = JobState(name=name, namespace=namespace, generation=body.metadata.get("generation"),
                       status=dict(body.get("status") or {}),
                       validation=validate_document(_document(body), memo.pod_policy))
        stale = memo.staleness.get((namespace, name))
        plan = decide(job, list(worker_pods.get((namespace, name), [])), _now(), memo.policy)
        if stale is not None:
            plan.status = _with_staleness(plan.status, stale, job)
        carry_out(plan, job, body, memo)
        for key, value in status_patch(job.status, plan.status).items():
            patch.status[key] = value
    memo.metrics.reconcile_seconds.observe(time.perf_counter() - started)


def carry_out(plan, job: JobState, body: kopf.Body, memo: kopf.Memo) -> None:
    kube, metrics = memo.kube, memo.metrics
    for event in plan.events:
        # kopf.event posts regardless of posting.level (which filters kopf's own log lines).
        kopf.event(body, type=event.type, reason=event.reason, message=c.cap(event.message))
    for pod_name, _why in plan.delete:
        kube.delete_pod(job.namespace, pod_name)
    if plan.create:
        owned = _owned(job, body)
        if plan.create_service:
            kube.create_if_absent(render_service(owned))
            if memo.network_policy is not None:
                kube.create_if_absent(render_network_policy(owned, memo.network_policy))
        for index in plan.create:
            if kube.create_if_absent(render_pod(owned, job.validation.resolved, index)):
                metrics.pods_created.inc()
    if plan.delete_job:
        kube.delete_job(job.namespace, job.name)
    for warning in plan.new_warnings:
        metrics.validation_warnings.labels(reason=warning.reason).inc()
    if plan.restarted:
        metrics.job_restarts.inc(plan.restarted)
    if plan.failed_reason:
        metrics.job_failures.labels(reason=plan.failed_reason).inc()
    if plan.became_running:
        created = parse_time(body.metadata.get("creationTimestamp"))
        if created is not None:
            metrics.time_to_running.observe(max(0.0, (_now() - created).total_seconds()))
    metrics.observe_phase((job.namespace, job.name), plan.status.get("phase"))


@kopf.timer(GROUP, VERSION, PLURAL, interval=PROGRESS_SECONDS, initial_delay=PROGRESS_SECONDS,
            field="status.phase", value="Running")
def refresh_progress(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, worker_pods: kopf.Index,
                     **_: Any) -> None:
    namespace, name = body.metadata.namespace, body.metadata.name
    validation = validate_document(_document(body), memo.pod_policy)
    if not validation.ok:
        return
    spec = validation.job.spec
    pods = worker_pods.get((namespace, name), [])
    report = next((r for r in (fetch_trainer_status(p.ip, spec.metrics.port) for p in status_sources(pods)) if r),
                  None)
    if report is None:
        return
    status = body.get("status") or {}
    progress = progress_from_trainer(report)
    checkpoint = checkpoint_from_trainer(report) or status.get("checkpoint")
    stale, message, age = checkpoint_staleness(progress, checkpoint, spec.checkpoint.interval_steps,
                                               global_batch(validation.job.spec, validation.resolved),
                                               status.get("startTime"), _now())
    memo.staleness[(namespace, name)] = (stale, message)
    if age is not None and checkpoint:
        memo.metrics.checkpoint_age.labels(namespace=namespace, job=name).set(age)
    for key, value in (("progress", progress), ("checkpoint", checkpoint)):
        if value and status.get(key) != value:
            patch.status[key] = value


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def forget(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    memo.metrics.forget(body.metadata.namespace, body.metadata.name)
    memo.staleness.pop((body.metadata.namespace, body.metadata.name), None)


# ---- small glue ---------------------------------------------------------------------


def _document(body: kopf.Body) -> dict:
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
            "metadata": {"name": body.metadata.name, "namespace": body.metadata.namespace},
            "spec": dict(body.get("spec") or {})}


def _owned(job: JobState, body: kopf.Body) -> Job:
    """The parsed job with the uid, so render adds owner references."""
    return dataclasses.replace(job.validation.job, uid=body.metadata.uid)


def _with_staleness(status: dict, stale: tuple[bool, str], job: JobState) -> dict:
    is_stale, message = stale
    if not is_stale and c.get_condition(status.get("conditions"), c.CHECKPOINT_STALE) is None:
        return status
    if status.get("phase") not in ("Running", "Restarting"):
        return status
    return set_cond(status, c.CHECKPOINT_STALE, is_stale,
                    c.CHECKPOINT_TOO_OLD if is_stale else c.CHECKPOINT_FRESH, message, job, iso(_now()))


def _now() -> datetime:
    return datetime.now(timezone.utc)
