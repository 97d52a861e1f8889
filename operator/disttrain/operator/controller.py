"""The shell around plan.decide: one keyed work queue, a few workers, one clock.

kopf only watches (handlers.py): a job's or one of its pods' events put the job's key
(namespace, name) on `queue`; workers take keys one at a time and run `reconcile(key)`,
which returns when to look again (a timer: keys an event queued go first). A key is
never reconciled by two workers at once, and events that arrive during a pass coalesce
into one more pass that sees the newest state; a pass that fails is retried after the
queue's per-key exponential back-off.

The trainer's /status is read through a second queue, `polls`, of running jobs, so a slow
or silent trainer never delays a reconcile; a report that moved puts the job on `queue`
(trainers.py). What a pass plans to create is created in the background (children.py).

Per job the shell keeps one `JobRecord` (record.py), by uid; time comes from the injected `Clock`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

from disttrain.api import conditions as c
from disttrain.api.policy import PodPolicy
from disttrain.api.status_types import DistributedTrainingStatus as Status
from disttrain.integrations.protocol import Integration
from disttrain.integrations.registry import integrations as configured_integrations
from disttrain.api.defaults import Images
from disttrain.api.status_types import TemplateStatus
from disttrain.api.template_resolution import resolve
from disttrain.api.validate import Validation, validate_document
from disttrain.operator.clock import Clock
from disttrain.operator.informer import PodWatch
from disttrain.operator.kube import ApiError, Kube
from disttrain.operator.metrics import OperatorMetrics
from disttrain.operator.core.state import TRAINING_PHASES, JobState, Plan, Policy
from disttrain.operator.core.plan import decide
from disttrain.operator.core.writes import look_again_in, routine_write, status_write
from disttrain.operator.core.nodes import NodeHealth
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.record import JobRecord, Key, foreign_conflicts
from disttrain.render.network_policy import NetworkPolicySettings
from disttrain.operator.settings import Settings
from disttrain.operator.core.status import read_status
from disttrain.api.times import iso, parse_time
from disttrain.operator.children import Children
from disttrain.operator.template_watch import Templates
from disttrain.operator.trainers import Trainers
from disttrain.operator.workqueue import TIMER, QueueShutDown, RateLimiter, WorkQueue

log = logging.getLogger("disttrain.controller")

# Let a burst of pod events (8 pods turning Running together) coalesce into one pass.
COALESCE_SECONDS = 0.05
# A failed pass is retried after 0.5 s, 1 s, 2 s ... up to this.
RETRY_MAX_SECONDS = 10.0
# Answers that say the status itself is wrong (a bug of ours, never the user's doing):
# retrying the same status cannot help.
STATUS_REFUSED = (400, 422)


@dataclasses.dataclass(frozen=True, slots=True)
class WatchedJob:
    """The newest version of a job the watch delivered: only what the shell reads."""

    uid: str
    generation: int | None
    deleting: bool
    created: str | None
    spec: dict[str, Any]
    status: dict[str, Any]
    api_version: str
    kind: str
    labels: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> WatchedJob:
        meta = body.get("metadata") or {}
        return cls(uid=meta.get("uid") or "", generation=meta.get("generation"),
                   deleting=bool(meta.get("deletionTimestamp")), created=meta.get("creationTimestamp"),
                   spec=dict(body.get("spec") or {}), status=dict(body.get("status") or {}),
                   api_version=body.get("apiVersion") or "", kind=body.get("kind") or "",
                   labels=dict(meta.get("labels") or {}))

    @property
    def marker(self) -> tuple[Any, ...]:
        """What makes a new pass worth it: not our own status writes."""
        return (self.uid, self.generation, self.deleting, tuple(sorted(self.labels.items())))


class Controller:
    """The jobs this operator knows, their records, and the queues that move them."""

    def __init__(self, *, settings: Settings, kube: Kube, metrics: OperatorMetrics, policy: Policy,
                 clock: Clock | None = None, pod_policy: PodPolicy = PodPolicy(),
                 network_policy: NetworkPolicySettings | None = None,
                 integrations: tuple[Integration, ...] | None = None):
        self.settings, self.kube, self.metrics, self.policy = settings, kube, metrics, policy
        # The controllers we cooperate with (integrations/registry.py), each behind one protocol.
        self.integrations = integrations if integrations is not None else configured_integrations(settings)
        self.clock = clock or Clock()
        self.pod_policy, self.network_policy = pod_policy, network_policy
        self.queue: WorkQueue[Key] = WorkQueue(self.clock, RateLimiter(self.clock, cap=RETRY_MAX_SECONDS),
                                               name="reconcile")
        self.polls: WorkQueue[Key] = WorkQueue(self.clock, name="progress")
        self.jobs: dict[Key, WatchedJob] = {}
        self.records: dict[str, JobRecord] = {}  # by job uid
        self.pods_index: Any = None  # our pods by (namespace, job): the PodWatch's cache (informer.py)
        self.pod_watch: PodWatch | None = None  # None (unit tests): pods_index is complete from the start
        self.nodes_index: Any = None  # kopf's index of node health by node name
        self._node_seen: dict[str, Any] = {}  # node -> (lost since, cordoned, health signals), as last seen: to act on changes only
        self.outbox: asyncio.Queue[tuple[dict[str, Any], str, str, str, str]] = asyncio.Queue()
        self._background: set[asyncio.Task[None]] = set()  # children being created (one task per job at most), checkpoint asks
        self.children = Children(self)
        self.trainers = Trainers(self)
        self.templates = Templates(self)

    # ---- what the watch tells (handlers.py) ---------------------------------------------

    def job_event(self, key: Key, body: Mapping[str, Any], event_type: str | None) -> None:
        """Remember the newest version; queue the job when it changed in a way that matters."""
        view = WatchedJob.of(body)
        if self.pod_watch is not None:
            self.pod_watch.want(key[0])
        if event_type == "DELETED":
            self.drop(key, view.uid)
            return
        before = self.jobs.get(key)
        self.jobs[key] = view
        if before is not None and before.uid != view.uid:
            self.drop_record(before.uid)  # the name was reused: the old job is gone
        if before is None or before.marker != view.marker:
            self.queue.add(key)

    def pod_event(self, key: Key) -> None:
        view = self.jobs.get(key)
        rec = self.records.get(view.uid) if view is not None else None
        if rec is not None:
            rec.pods_changed = self.clock.monotonic()
        self.queue.add_after(key, COALESCE_SECONDS)

    def pods_synced(self, namespace: str | None) -> None:
        """The pods of a namespace (None: of every namespace) are all listed: its jobs,
        which waited for that, go now."""
        for key in self.jobs:
            if namespace is None or key[0] == namespace:
                self.queue.add(key)

    def node_event(self, name: str, deleted: bool = False) -> None:
        """A node was lost or came back, cordoned or uncordoned, or one of the signals of
        its health (nodes.NodeRules: a watched condition, a taint, its allocatable devices)
        changed: queue the jobs with workers on it (heartbeats that change nothing cost one
        comparison)."""
        health = None if deleted else self._node(name)
        first = name not in self._node_seen
        before = self._node_seen.pop(name, None)
        seen = None
        if health is not None:
            watched = health.watched(self.policy.node_rules)
            seen = (health.lost_since(), health.cordoned, watched, health.allocatable)
            self._node_seen[name] = seen
            # A node seen for the first time matters only when it is not plainly healthy.
            if first and seen[:3] == (None, False, ((), ())):
                return
        if seen == before:
            return
        for key, pods in list((self.pods_index or {}).items()):
            if any(p.node == name for p in pods):
                self.queue.add(key)

    def drop(self, key: Key, uid: str | None) -> None:
        """The job is gone: forget it and everything about it; a pass already queued for it
        finds nothing and makes no API call."""
        view = self.jobs.get(key)
        if view is not None and (not uid or view.uid == uid):
            del self.jobs[key]
        if uid:
            self.drop_record(uid)
        self.queue.discard(key)
        self.polls.discard(key)
        self.metrics.forget(*key)

    def drop_record(self, uid: str) -> None:
        self.records.pop(uid, None)

    # ---- workers ---------------------------------------------------------------------

    async def run(self, workers: int) -> None:
        """Reconcile and poll until cancelled (or the queues are shut down)."""
        tasks = [asyncio.create_task(self._work(self.queue, self.reconcile_key, self._failed), name=f"reconcile-{i}")
                 for i in range(workers)]
        tasks += [asyncio.create_task(self._work(self.polls, self.trainers.poll, None), name=f"progress-{i}")
                  for i in range(max(1, workers // 4))]
        events = asyncio.create_task(self._post_events(), name="events")
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in (*tasks, events, *self._background):
                task.cancel()
            await asyncio.gather(*tasks, events, *self._background, return_exceptions=True)

    def shutdown(self) -> None:
        self.queue.shutdown()
        self.polls.shutdown()

    async def _work(self, queue: WorkQueue[Key], process: Any, on_error: Any) -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            try:
                again = await process(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  (a worker must outlive any failure of one key)
                if on_error is None:
                    log.warning("%s/%s: %s failed: %s", *key, queue.name, exc, exc_info=True)
                else:
                    on_error(key, exc)
            else:
                queue.forget(key)
                if again is not None:  # a timer: it goes behind every job an event queued
                    queue.add_after(key, again, TIMER)
            finally:
                queue.done(key)

    def _failed(self, key: Key, exc: Exception) -> None:
        delay = self.queue.add_rate_limited(key)
        reason = f"Api{exc.status}" if isinstance(exc, ApiError) else type(exc).__name__
        self.metrics.reconcile_errors.labels(reason=reason).inc()
        log.warning("reconciling %s/%s failed (%s, attempt %d); retrying in %.1fs: %s",
                    *key, reason, self.queue.limiter.retries(key), delay, exc, exc_info=not isinstance(exc, ApiError))

    # ---- one pass --------------------------------------------------------------------

    async def reconcile_key(self, key: Key) -> float | None:
        started = time.perf_counter()
        try:
            return await self.reconcile(key)
        finally:
            self.metrics.reconcile_seconds.observe(time.perf_counter() - started)

    async def reconcile(self, key: Key) -> float | None:
        """Observe, decide (pure), carry out, write status. Returns seconds until the next look."""
        view = self.jobs.get(key)
        if view is None or view.deleting:
            return None  # gone, or being deleted: the garbage collector removes the children
        if self.pod_watch is not None and not self.pod_watch.synced(key[0]):
            return None  # its pods are not all listed yet: pods_synced queues it when they are
        clock = self.clock
        started = clock.monotonic()
        rec = self.records.get(view.uid)
        if rec is None:
            rec = self.records[view.uid] = JobRecord(uid=view.uid, key=key)
        elif clock.monotonic() >= rec.resync_due:
            # Nothing happened for a whole resync period: a deletion the watch did not deliver?
            if await self.kube.job_uid(*key) != view.uid:
                self.drop(key, view.uid)
                return None
        rec.resync_due = clock.monotonic() + self.settings.resync_seconds
        namespace, name = key
        base = rec.last_status if rec.last_status is not None else self._read_status(key, view)
        validation, template = self.validate(view, rec, key, base)
        joined = tuple([found for integration in self.integrations
                        if (found := await integration.observe(self, key, view)) is not None])
        job = JobState(name=name, namespace=namespace, generation=view.generation, status=base,
                       validation=validation, joined=joined, template=template)
        pods, foreign = rec.own_pods(self.observed(key), clock.monotonic())
        await self.children.recheck_conflicts(namespace, rec)
        conflicts = {**{n: who for n, (_kind, who) in rec.conflicts.items()}, **foreign_conflicts(foreign, name)}
        moment = clock.now()
        nodes = {p.node: health for p in pods if p.node and (health := self._node(p.node)) is not None}
        plan = decide(job, pods, moment, self.policy, report=rec.report, conflicts=conflicts, refusal=rec.refusal,
                      nodes=nodes, checkpoint_refused=self.trainers.checkpoint_refused(base, rec))
        if not await self.carry_out(plan, job, view, pods, rec):
            return None  # the job is gone
        deferred = await self._write_status(key, base, plan.status, rec, started)
        self._observe_metrics(plan, job, view, moment)
        if plan.status.phase in TRAINING_PHASES and validation.ok and not self.polls.pending(key) \
                and not self.polls.processing(key):
            self.polls.add_after(key, self.settings.progress_seconds)
        return look_again_in(
            resync=self.settings.resync_seconds, deferred_write=deferred,
            wake=(plan.wake_at - clock.now()).total_seconds() if plan.wake_at is not None else None,
            refusal_retry=rec.refused_until - clock.monotonic() if rec.refusal is not None else None,
            squatters=bool(rec.conflicts))

    @staticmethod
    def _read_status(key: Key, view: WatchedJob) -> Status:
        """The status the API server holds, typed, for the first pass of this operator over
        the job (later passes start from the status they wrote themselves)."""
        status, errors = read_status(view.status)
        for error in errors:
            log.warning("%s/%s: ignoring a status field this operator does not write: %s", *key, error)
        return status

    def validate(self, view: WatchedJob, rec: JobRecord, key: Key,
                 status: Status) -> tuple[Validation, TemplateStatus | None]:
        """The job's spec, resolved against its training template (templates.py), validated
        once per generation and template: the API server bumps the generation on every spec
        change, and passes and progress polls between changes reuse the result. A job that
        names no image keeps the one its status says it resolved. Returns the validation and
        the template the job keeps (status.template)."""
        template, missing = self.templates.choose(view, key, status)
        identity = (view.generation, template and (template.kind, template.name, template.uid, template.generation),
                    missing and str(missing))
        cached = rec.validation
        if cached is not None and view.generation is not None and cached[0] == identity:
            return cached[1], cached[2]
        document = {"apiVersion": view.api_version, "kind": view.kind,
                    "metadata": {"name": key[1], "namespace": key[0]}, "spec": dict(view.spec)}
        refused = []
        if template is not None:
            resolution = resolve(template, document)
            document, refused = resolution.doc, resolution.errors
        # Nothing to validate before the template is there: what the job lacks may be its to give.
        validation = Validation(None, None, [missing]) if missing is not None else validate_document(
            document, self.pod_policy, Images.of(self.settings.trainer_image, status.resolved))
        if refused:
            validation = Validation(None, None, [*refused, *validation.errors], validation.warnings)
        kept = self.templates.kept(template, status, iso(self.clock.now())) if validation.ok else status.template
        rec.validation = (identity, validation, kept)
        return validation, kept

    def tell(self, key: Key, view: WatchedJob, type_: str, reason: str, message: str) -> None:
        """An Event about a job outside its pass (the pass's own go through its plan)."""
        involved = {"apiVersion": view.api_version, "kind": view.kind, "name": key[1], "namespace": key[0],
                    "uid": view.uid}
        self.outbox.put_nowait((involved, type_, reason, c.cap(message), iso(self.clock.now())))

    async def carry_out(self, plan: Plan, job: JobState, view: WatchedJob, pods: list[PodInfo],
                        rec: JobRecord) -> bool:
        """Post, delete, create as planned. False: the job turned out to be gone (forgotten)."""
        kube, clock = self.kube, self.clock
        for event in plan.events:
            if (event.reason, event.message) not in rec.posted:  # once per reason and message
                rec.posted.add((event.reason, event.message))
                self.outbox.put_nowait((self._ref(job, view), event.type, event.reason, c.cap(event.message),
                                        iso(clock.now())))
        uids = {p.name: p.uid for p in pods}
        for pod_name, why in plan.delete:
            # A lost node's pods are deleted at once: no kubelet is left to confirm a graceful end.
            await kube.delete_pod(job.namespace, pod_name, uids.get(pod_name), force=why == c.NODE_LOST)
            log.info("%s/%s: deleted pod %s (%s)", job.namespace, job.name, pod_name, why)
            if uids.get(pod_name):
                rec.expect_delete(uids[pod_name], clock.monotonic())
        if not plan.create:
            if not any(step.creates for step in plan.steps):
                rec.refusal, rec.refusals = None, 0  # nothing left to create: nothing refused
        elif clock.monotonic() >= rec.refused_until and not rec.creating:
            # Creating is the one step that must not act on a job that is gone (a deleted
            # CRD takes every job with it, and its watch may end before their DELETED
            # events): read the job first.
            if await kube.job_uid(job.namespace, job.name) != view.uid:
                self.drop((job.namespace, job.name), view.uid)
                return False
            self.children.start(plan, job, view, rec)
        if plan.delete_job:
            await kube.delete_job(job.namespace, job.name)
        for integration in self.integrations:
            joined = job.joined_to(integration.name)
            steps = [step for step in plan.steps if step.integration == integration.name]
            if joined is not None and steps:
                await integration.carry_out(self, rec, job, view, joined, steps)
        if plan.ask_checkpoint is not None and plan.status.eviction is not None:
            self.trainers.ask_checkpoint(plan.status.eviction.request_time, plan.ask_checkpoint, job, pods, rec)
        return True

    # ---- what the integrations' shells may use (integrations/protocol.py: Shell) ------------

    async def create_or_refuse(self, record: JobRecord, key: Key, body: dict, hints: Mapping[int, str]) -> bool:
        try:
            result = await self.kube.create(body)
        except ApiError as exc:
            self.children.refused(record, key, f"{body['kind']} {body['metadata']['name']}", exc, hints)
            return False
        record.refusal, record.refusals = None, 0
        return bool(result.created)

    def refuse(self, record: JobRecord, key: Key, what: str, code: int, reason: str, message: str,
               hints: Mapping[int, str]) -> None:
        self.children.refused(record, key, what, ApiError(code, reason, message, f"reading {what}"), hints)

    def refused_lately(self, record: JobRecord) -> bool:
        return self.clock.monotonic() < record.refused_until

    def look_again(self, key: Key) -> None:
        self.queue.add_after(key, COALESCE_SECONDS)

    def spawn(self, work: Any) -> None:
        """Run in the background, cancelled with the workers (run)."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def settled(self) -> None:
        """Wait for the creations in flight (tests; shutdown)."""
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)


    async def _write_status(self, key: Key, base: Status, new: Status, rec: JobRecord,
                            started: float) -> float | None:
        """Write the changed fields now, or say when a deferred write is due (writes.status_write).
        A status the API server refuses as invalid (a bug of ours) is logged and counted, and
        the decision stands all the same: the record keeps it, so the job moves on (a restart
        scheduled in that status still happens) instead of deciding the same thing forever.
        Any other failure (RBAC, conflicts, the API server away) fails the pass, which the
        queue retries with back-off."""
        patch, wait = status_write(base, new, self.clock.monotonic() - rec.last_write)
        if wait is not None:
            return wait
        if patch:
            asked = self.clock.monotonic()
            try:
                await self.kube.patch_status(*key, patch, routine=routine_write(patch))
            except ApiError as exc:
                if exc.status not in STATUS_REFUSED:
                    raise
                self.metrics.reconcile_errors.labels(reason=f"Api{exc.status}").inc()
                log.error("%s/%s: the API server refused the status fields %s: %s", *key, sorted(patch), exc)
            rec.last_write = self.clock.monotonic()
            if new.phase != base.phase:
                self._log_phase(key, base, new, rec, started, asked)
        rec.last_status = new
        return None

    def _log_phase(self, key: Key, base: Status, new: Status, rec: JobRecord, started: float, asked: float) -> None:
        """A phase change, with where the time went from the pod change that caused it to
        the patch that says it: a job slow to show Running points at the watch, the queue
        (all workers busy), the pass or the write (its token, the API server)."""
        since_pods = f"{started - rec.pods_changed:.3f}s" if rec.pods_changed is not None else "-"
        log.info("%s/%s: phase %s -> %s; the pods changed %s before the pass, which had waited %.3fs for a "
                 "worker and took %.3fs to decide; the patch took %.3fs", *key, base.phase or "(none)", new.phase,
                 since_pods, self.queue.waited(key), asked - started, rec.last_write - asked)

    def _observe_metrics(self, plan: Plan, job: JobState, view: WatchedJob, moment: Any) -> None:
        metrics = self.metrics
        for warning in plan.new_warnings:
            metrics.validation_warnings.labels(reason=warning.reason).inc()
        if plan.restarted:
            metrics.job_restarts.inc(plan.restarted)
        if plan.failed_reason:
            metrics.job_failures.labels(reason=plan.failed_reason).inc()
        for failure in plan.new_failures:
            metrics.worker_failures.labels(namespace=job.namespace, job=job.name, cause=failure.cause).inc()
        for cause, seconds in plan.lost_seconds.items():
            metrics.lost_seconds.labels(namespace=job.namespace, job=job.name, cause=cause).inc(seconds)
        goodput = plan.status.goodput
        if goodput is not None and goodput.ratio is not None:
            metrics.goodput_ratio.labels(namespace=job.namespace, job=job.name).set(goodput.ratio)
        if plan.straggler_ratio is not None:
            metrics.straggler_ratio.labels(namespace=job.namespace, job=job.name).set(plan.straggler_ratio)
        if plan.became_running:
            created = parse_time(view.created)
            if created is not None:
                metrics.time_to_running.observe(max(0.0, (moment - created).total_seconds()))
        phase = plan.status.phase
        metrics.observe_phase((job.namespace, job.name), phase)
        if phase in TRAINING_PHASES and plan.checkpoint_age is not None:
            metrics.checkpoint_age.labels(namespace=job.namespace, job=job.name).set(plan.checkpoint_age)
        elif phase in ("Succeeded", "Failed"):
            metrics.forget_checkpoint(job.namespace, job.name)

    # ---- small glue ------------------------------------------------------------------

    def _node(self, name: str) -> NodeHealth | None:
        try:
            found = list(self.nodes_index.get(name, [])) if self.nodes_index is not None else []
        except (KeyError, TypeError):
            return None
        return found[-1] if found else None

    def observed(self, key: Key) -> list[PodInfo]:
        try:
            return list(self.pods_index.get(key, [])) if self.pods_index is not None else []
        except (KeyError, TypeError):
            return []

    @staticmethod
    def _ref(job: JobState, view: WatchedJob) -> dict[str, Any]:
        """The job an Event is about, as an Event's involvedObject."""
        return {"apiVersion": view.api_version, "kind": view.kind, "name": job.name, "namespace": job.namespace,
                "uid": view.uid}

    async def _post_events(self) -> None:
        """Events go out in the background, in the order they were decided: a slow Event
        write never holds up a pass. One that fails is logged and dropped (Events are a
        courtesy; what matters is in status too)."""
        while True:
            involved, type_, reason, message, when = await self.outbox.get()
            try:
                await self.kube.post_event(involved, type_, reason, message, when)
            except ApiError as exc:
                log.warning("%s/%s: event %s not posted: %s", involved["namespace"], involved["name"], reason, exc)

