"""The shell around plan.decide: one asyncio loop per job, woken by events.

A job's loop (a kopf daemon, so peering pauses it) sleeps until something it waits for
happens: a change of the job, an event of one of its pods, a new trainer report, or a
moment the plan asked for (a back-off ends, a TTL runs out); a slow safety resync
remains. Wakes that arrive while a pass runs coalesce into one more pass, which sees
the newest state. Every failure is caught, logged, counted and retried with back-off,
for as long as the job exists: nothing leaves a job unattended.

What the shell remembers per job (`JobMemory`) is what the watch cannot tell yet:
creations and deletions it asked for and has not seen (expectations, as Kubernetes'
own controllers keep), the status it last wrote, the names it found taken by others,
and the API's last refusal. It is dropped with the job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf

from . import conditions as c
from .api.names import worker_index
from .api.policy import PodPolicy
from .api.validate import Validation, validate_document
from .kube import ApiError, Kube
from .metrics import OperatorMetrics
from .plan import JobState, Plan, Policy, Refusal, checkpoint_age, decide, status_patch
from .pods import PodInfo, controller_uid
from .render import TEMPLATE_HASH_ANNOTATION, render_pod, render_service
from .render.network_policy import NetworkPolicySettings, render_network_policy
from .report import TrainerReport, parse_report
from .settings import Settings
from .status import status_sources
from .times import parse_time

log = logging.getLogger("disttrain.controller")

# How long a creation or deletion we asked for may stay unseen by the watch before we
# stop counting on it (the watch lost it, or someone undid it).
EXPECTATION_SECONDS = 30.0
# Let a burst of pod events (8 pods turning Running together) coalesce into one pass.
COALESCE_SECONDS = 0.05
# Retry a failed pass soon and forever; a pod or job event retries at once anyway.
ERROR_BACKOFF = (0.5, 1, 2, 4, 8, 10)
# Status fields whose change alone may wait for the next write (see _write_status): the
# counters move with every pod event, and a job of 8 pods starting over half a minute
# would otherwise write its status a dozen times.
DEFERRABLE_STATUS = frozenset({"workers"})
COUNTERS_DELAY_SECONDS = 30.0
# A name held by someone else's object is looked at again this often.
CONFLICT_RECHECK_SECONDS = 5.0
# A pod creation the API refused (admission, quota) is retried after these seconds.
REFUSAL_BACKOFF = (2, 4, 8, 15, 30)
# A deleted job's uid is remembered this long: its loops notice within a pass.
GONE_SECONDS = 300.0

Key = tuple[str, str]  # (namespace, job name)


@dataclass
class JobMemory:
    expected_creates: dict[str, tuple[float, str | None]] = field(default_factory=dict)  # name -> (deadline, hash)
    expected_deletes: dict[str, float] = field(default_factory=dict)  # pod uid -> deadline
    conflicts: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (kind, who holds it)
    refusal: Refusal | None = None
    refused_until: float = 0.0  # no creation is retried before this (monotonic clock)
    refusals: int = 0  # in a row: the retry back-off grows with it
    last_write: float = -1e9  # when status was last written (monotonic clock)
    last_status: dict[str, Any] | None = None
    service_ok: bool = False
    posted: set[tuple[str, str]] = field(default_factory=set)  # (reason, message) Events posted


@dataclass
class Shared:
    """State shared by all job loops of this operator (one event loop: no locks needed)."""

    settings: Settings
    kube: Kube
    metrics: OperatorMetrics
    policy: Policy
    pod_policy: PodPolicy = PodPolicy()
    network_policy: NetworkPolicySettings | None = None
    wakers: dict[Key, asyncio.Event] = field(default_factory=dict)
    reports: dict[Key, TrainerReport] = field(default_factory=dict)
    memories: dict[str, JobMemory] = field(default_factory=dict)  # by job uid
    seen: dict[Key, tuple[Any, ...]] = field(default_factory=dict)  # what last woke a job
    gone: dict[str, float] = field(default_factory=dict)  # uids of deleted jobs -> when (monotonic)
    validations: dict[str, tuple[Any, Validation]] = field(default_factory=dict)  # uid -> (generation, result)
    farewells: dict[str, asyncio.Event] = field(default_factory=dict)  # uid -> set when the job is deleted

    def wake(self, key: Key) -> None:
        waker = self.wakers.get(key)
        if waker is not None:
            waker.set()

    def job_event(self, key: Key, body: kopf.Body, event_type: str | None) -> None:
        """Wake a job when it changed in a way that matters (not on our own status writes)."""
        if event_type == "DELETED":
            self.depart(key, body.metadata.uid)
            return
        marker = (body.metadata.uid, body.metadata.get("generation"), bool(body.metadata.get("deletionTimestamp")))
        if self.seen.get(key) != marker:
            self.seen[key] = marker
            self.wake(key)

    def depart(self, key: Key, uid: str | None) -> None:
        """The job is gone (its DELETED event, or a resync that found it missing): forget
        it, and wake its loops so they see it gone and end."""
        self.forget(key, uid)
        self.bury(uid)
        self.wake(key)

    def bury(self, uid: str | None) -> None:
        """Remember a deleted job's uid long enough for its loops to notice. Jobs carry
        no finalizer (handlers.py), so kopf does not stop their daemons: they stop here."""
        clock = time.monotonic()
        if uid:
            self.gone[uid] = clock
            farewell = self.farewells.pop(uid, None)
            if farewell is not None:
                farewell.set()
        for old in [u for u, when in self.gone.items() if clock - when > GONE_SECONDS]:
            del self.gone[old]

    def validate(self, body: kopf.Body) -> Validation:
        """The job's spec validated once per generation: the API server bumps it on every
        spec change, and passes and progress polls between changes reuse the result."""
        uid, generation = body.metadata.uid, body.metadata.get("generation")
        cached = self.validations.get(uid)
        if cached is not None and generation is not None and cached[0] == generation:
            return cached[1]
        validation = validate_document(_document(body), self.pod_policy)
        self.validations[uid] = (generation, validation)
        return validation

    def forget(self, key: Key, uid: str | None) -> None:
        self.reports.pop(key, None)
        self.seen.pop(key, None)
        if uid:
            self.memories.pop(uid, None)
            self.validations.pop(uid, None)
        self.metrics.forget(*key)


def now() -> datetime:
    return datetime.now(timezone.utc)


async def run_job(shared: Shared, body: kopf.Body, pods_index: Any, stopped: kopf.DaemonStopped) -> None:
    """The job's loop: wait for a reason, reconcile, repeat; never dies on an error. It
    ends when the job is deleted, or when kopf stops it (peering pause, shutdown)."""
    key, uid = (body.metadata.namespace, body.metadata.name), body.metadata.uid
    waker = shared.wakers.setdefault(key, asyncio.Event())
    waker.set()  # the first pass runs at once
    relay = asyncio.create_task(_wake_when_stopped(stopped, waker))
    failures = 0
    timeout = 0.0
    try:
        while not stopped and uid not in shared.gone:
            resync = False
            try:
                await asyncio.wait_for(waker.wait(), timeout=max(timeout, 0.0))
                await asyncio.sleep(COALESCE_SECONDS)
            except asyncio.TimeoutError:
                resync = timeout >= shared.settings.resync_seconds
            waker.clear()
            if stopped or uid in shared.gone:
                break
            started = time.perf_counter()
            try:
                if resync and await shared.kube.job_uid(*key) != uid:
                    # A deletion the watch did not deliver (no finalizer waits for us).
                    shared.depart(key, uid)
                    break
                wake_at = await reconcile(shared, body, _pods_of(pods_index, key))
                failures = 0
                timeout = shared.settings.resync_seconds
                if wake_at is not None:
                    timeout = min(timeout, (wake_at - now()).total_seconds())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  (the loop must outlive any failure)
                timeout = ERROR_BACKOFF[min(failures, len(ERROR_BACKOFF) - 1)]
                failures += 1
                reason = f"Api{exc.status}" if isinstance(exc, ApiError) else type(exc).__name__
                shared.metrics.reconcile_errors.labels(reason=reason).inc()
                log.warning("reconciling %s/%s failed (%s, attempt %d); retrying in %.1fs: %s",
                            *key, reason, failures, timeout, exc, exc_info=not isinstance(exc, ApiError))
            finally:
                shared.metrics.reconcile_seconds.observe(time.perf_counter() - started)
    finally:
        relay.cancel()
        if shared.wakers.get(key) is waker:
            del shared.wakers[key]


async def _wake_when_stopped(stopped: kopf.DaemonStopped, waker: asyncio.Event) -> None:
    """kopf's stop flag wakes the loop at once, so it ends without being cancelled."""
    await stopped.wait()
    waker.set()


async def reconcile(shared: Shared, body: kopf.Body, observed: list[PodInfo]) -> datetime | None:
    """One pass: observe, decide (pure), carry out, write status. Returns when to look again."""
    namespace, name, uid = body.metadata.namespace, body.metadata.name, body.metadata.uid
    if body.metadata.get("deletionTimestamp"):
        return None  # being deleted: the garbage collector removes the children
    mem = shared.memories.setdefault(uid, JobMemory())
    moment = now()
    validation = shared.validate(body)
    base = mem.last_status if mem.last_status is not None else dict(body.get("status") or {})
    job = JobState(name=name, namespace=namespace, generation=body.metadata.get("generation"),
                   status=base, validation=validation)
    pods, foreign = _own_pods(observed, uid, mem)
    await _recheck_conflicts(shared.kube, namespace, mem)
    conflicts = {**{n: who for n, (_kind, who) in mem.conflicts.items()}, **_foreign_conflicts(foreign, name)}
    plan = decide(job, pods, moment, shared.policy, report=shared.reports.get((namespace, name)),
                  conflicts=conflicts, refusal=mem.refusal)
    await carry_out(shared, plan, job, body, pods, mem)
    deferred = await _write_status(shared, namespace, name, base, plan.status, mem)
    _observe_metrics(shared, plan, job, body, moment)
    wakes = [plan.wake_at, deferred]
    if mem.refusal is not None:  # look again when the refused creation may be retried
        wakes.append(now() + timedelta(seconds=max(0.0, mem.refused_until - time.monotonic())))
    if mem.conflicts:  # squatters send us no events (not our labels): look again soon
        wakes.append(now() + timedelta(seconds=CONFLICT_RECHECK_SECONDS))
    present = [w for w in wakes if w is not None]
    return min(present) if present else None


async def carry_out(shared: Shared, plan: Plan, job: JobState, body: kopf.Body, pods: list[PodInfo],
                    mem: JobMemory) -> None:
    kube = shared.kube
    for event in plan.events:
        if (event.reason, event.message) not in mem.posted:  # once per reason and message
            mem.posted.add((event.reason, event.message))
            kopf.event(body, type=event.type, reason=event.reason, message=c.cap(event.message))
    uids = {p.name: p.uid for p in pods}
    for pod_name, why in plan.delete:
        await kube.delete_pod(job.namespace, pod_name, uids.get(pod_name))
        log.info("%s/%s: deleted pod %s (%s)", job.namespace, job.name, pod_name, why)
        if uids.get(pod_name):
            mem.expected_deletes[uids[pod_name]] = time.monotonic() + EXPECTATION_SECONDS
    if not plan.create:
        mem.refusal, mem.refusals = None, 0  # nothing left to create: nothing refused
    elif time.monotonic() >= mem.refused_until:
        creates = len(plan.create) + (2 if plan.create_service and not mem.service_ok else 0)
        async with kube.creating(creates):
            await _create_children(shared, plan, job, body, mem)
    if plan.delete_job:
        await kube.delete_job(job.namespace, job.name)


CREATED, OURS, TAKEN = "created", "ours", "taken"


async def _create_children(shared: Shared, plan: Plan, job: JobState, body: kopf.Body, mem: JobMemory) -> None:
    """The Service and NetworkPolicy (once), then the planned pods, in index order; a
    refused pod stops the batch and is said on the job."""
    metrics = shared.metrics
    owned = dataclasses.replace(job.validation.job, uid=body.metadata.uid)
    if plan.create_service and not mem.service_ok:
        mem.service_ok = await _ensure_child(shared, render_service(owned), mem, body.metadata.uid)
        if mem.service_ok and shared.network_policy is not None:
            mem.service_ok = await _ensure_child(
                shared, render_network_policy(owned, shared.network_policy), mem, body.metadata.uid)
        if not mem.service_ok:
            shared.wake((job.namespace, job.name))  # the conflict goes into status next pass
            return
    for index in plan.create:
        pod = render_pod(owned, job.validation.resolved, index)
        try:
            outcome = await _create_child(shared, pod, mem, body.metadata.uid)
        except ApiError as exc:
            if exc.transient or exc.status in (401,):
                raise
            # Admission, quota or validation said no: say so on the job (next pass),
            # and retry after a growing back-off (a quota may free up, a label change).
            mem.refusal = Refusal(pod=pod["metadata"]["name"], code=exc.status, reason=exc.reason,
                                  message=exc.message)
            mem.refused_until = time.monotonic() + REFUSAL_BACKOFF[min(mem.refusals, len(REFUSAL_BACKOFF) - 1)]
            mem.refusals += 1
            shared.wake((job.namespace, job.name))
            break
        mem.refusal, mem.refusals = None, 0
        if outcome == CREATED:
            metrics.pods_created.inc()
            log.info("%s/%s: created pod %s", job.namespace, job.name, pod["metadata"]["name"])


async def _create_child(shared: Shared, obj: dict, mem: JobMemory, uid: str) -> str:
    """Create: CREATED; a 409 is fine when the holder is ours (OURS: the watch has not
    shown it yet), and a NameConflict when it is not (TAKEN)."""
    name = obj["metadata"]["name"]
    result = await shared.kube.create(obj)
    if result.created:
        if obj["kind"] == "Pod":
            annotations = obj["metadata"].get("annotations") or {}
            mem.expected_creates[name] = (time.monotonic() + EXPECTATION_SECONDS,
                                          annotations.get(TEMPLATE_HASH_ANNOTATION))
        return CREATED
    existing = result.existing or {}
    if controller_uid(existing.get("metadata") or {}) == uid:
        return OURS
    if existing:
        mem.conflicts[name] = (obj["kind"], _describe(obj["kind"], existing))
    return TAKEN


async def _ensure_child(shared: Shared, obj: dict, mem: JobMemory, uid: str) -> bool:
    """The Service and the NetworkPolicy are not watched: look the name up once per job and
    operator lifetime (a read) rather than send a create that answers 409 after a restart."""
    kind, name = obj["kind"], obj["metadata"]["name"]
    existing = await shared.kube.get(obj["metadata"]["namespace"], kind, name)
    if existing is None:
        return await _create_child(shared, obj, mem, uid) != TAKEN
    if controller_uid(existing.get("metadata") or {}) == uid:
        return True
    mem.conflicts[name] = (kind, _describe(kind, existing))
    return False


async def _recheck_conflicts(kube: Kube, namespace: str, mem: JobMemory) -> None:
    """A squatter found through a 409 is looked at again: once it is gone the name is free."""
    for name, (kind, _who) in list(mem.conflicts.items()):
        holder = await kube.get(namespace, kind, name)
        if holder is None:
            del mem.conflicts[name]
            if kind == "Service":
                mem.service_ok = False


async def _write_status(shared: Shared, namespace: str, name: str, base: dict, new: dict,
                        mem: JobMemory) -> datetime | None:
    """Write the changed fields. A change of the worker counters alone (pods starting one
    by one) waits up to COUNTERS_DELAY_SECONDS to go out with the next change; phase,
    conditions and everything else go out at once. Returns when a deferred write is due."""
    patch = status_patch(base, new)
    if not patch:
        mem.last_status = new
        return None
    since = time.monotonic() - mem.last_write
    if set(patch) <= DEFERRABLE_STATUS and since < COUNTERS_DELAY_SECONDS:
        return now() + timedelta(seconds=COUNTERS_DELAY_SECONDS - since)
    await shared.kube.patch_status(namespace, name, patch)
    mem.last_status, mem.last_write = new, time.monotonic()
    return None


def _observe_metrics(shared: Shared, plan: Plan, job: JobState, body: kopf.Body, moment: datetime) -> None:
    metrics = shared.metrics
    for warning in plan.new_warnings:
        metrics.validation_warnings.labels(reason=warning.reason).inc()
    if plan.restarted:
        metrics.job_restarts.inc(plan.restarted)
    if plan.failed_reason:
        metrics.job_failures.labels(reason=plan.failed_reason).inc()
    if plan.became_running:
        created = parse_time(body.metadata.get("creationTimestamp"))
        if created is not None:
            metrics.time_to_running.observe(max(0.0, (moment - created).total_seconds()))
    phase = plan.status.get("phase")
    metrics.observe_phase((job.namespace, job.name), phase)
    age = checkpoint_age(plan.status, moment)
    if phase in ("Running", "Restarting") and age is not None:
        metrics.checkpoint_age.labels(namespace=job.namespace, job=job.name).set(age)
    elif phase in ("Succeeded", "Failed"):
        metrics.forget_checkpoint(job.namespace, job.name)


async def poll_progress(shared: Shared, body: kopf.Body, pods_index: Any, stopped: kopf.DaemonStopped) -> None:
    """Read a ready trainer's /status every progress period; wake the job when it moved.
    Its own loop, so slow or silent trainers never delay a reconcile. A job whose trainer
    does not answer (a script without a status server, a network policy in the way) is
    asked less and less often, up to SILENT_TRAINER_MAX_SECONDS, and at the normal
    period again as soon as it answers."""
    key, uid = (body.metadata.namespace, body.metadata.name), body.metadata.uid
    # Woken early by kopf's stop flag or by the job's deletion (kopf forgets a deleted
    # job without a finalizer, so its stop flag never comes then).
    farewell = shared.farewells.setdefault(uid, asyncio.Event())
    relay = asyncio.create_task(_wake_when_stopped(stopped, farewell))
    silent = 0  # polls in a row that got no report
    try:
        while not stopped and uid not in shared.gone:
            try:
                await asyncio.wait_for(farewell.wait(), timeout=silent_poll_seconds(shared.settings.progress_seconds,
                                                                                    silent))
            except asyncio.TimeoutError:
                pass
            if stopped or uid in shared.gone or (body.get("status") or {}).get("phase") not in ("Running",
                                                                                                  "Restarting"):
                continue
            validation = shared.validate(body)
            if not validation.ok:
                continue
            port = validation.job.spec.metrics.port
            own = [p for p in _pods_of(pods_index, key) if p.owner_uid == uid]
            report = None
            for pod in status_sources(own):
                report = parse_report(await shared.kube.trainer_status(pod.ip, port))
                if report is not None:
                    break
            silent = 0 if report is not None else silent + 1
            if report is not None and _moved(shared.reports.get(key), report):
                shared.reports[key] = report
                shared.wake(key)
    finally:
        relay.cancel()
        if shared.farewells.get(uid) is farewell:
            del shared.farewells[uid]


# A trainer that does not answer /status is asked at most this rarely.
SILENT_TRAINER_MAX_SECONDS = 120.0


def silent_poll_seconds(period: float, silent: int) -> float:
    """The wait before the next /status poll after `silent` unanswered ones in a row:
    the period, doubling from the second miss, capped (the first miss may be a restart)."""
    if silent <= 1:
        return period
    return min(period * 2 ** (silent - 1), max(period, SILENT_TRAINER_MAX_SECONDS))


def _moved(old: TrainerReport | None, new: TrainerReport) -> bool:
    if old is None:
        return True
    return ((old.step, old.checkpoint, old.outcome, old.loss, old.eval_loss)
            != (new.step, new.checkpoint, new.outcome, new.loss, new.eval_loss))


# ---- small glue ----------------------------------------------------------------------


def _pods_of(pods_index: Any, key: Key) -> list[PodInfo]:
    try:
        return list(pods_index.get(key, []))
    except (KeyError, TypeError):
        return []


def _own_pods(observed: Iterable[PodInfo], uid: str, mem: JobMemory) -> tuple[list[PodInfo], list[PodInfo]]:
    """This job's pods (by owner uid), with what it asked for and the watch has not shown
    yet; and the pods that carry its label but belong to someone else."""
    clock = time.monotonic()
    own = [p for p in observed if p.owner_uid == uid]
    foreign = [p for p in observed if p.owner_uid != uid]
    names = {p.name for p in own}
    for name, (deadline, _hash) in list(mem.expected_creates.items()):
        if name in names or deadline < clock:
            del mem.expected_creates[name]
    live_uids = {p.uid for p in own if not p.terminating}
    for pod_uid, deadline in list(mem.expected_deletes.items()):
        if pod_uid not in live_uids or deadline < clock:
            del mem.expected_deletes[pod_uid]
    pods = [dataclasses.replace(p, terminating=True) if p.uid in mem.expected_deletes else p for p in own]
    pods += [_placeholder(name, template) for name, (_deadline, template) in mem.expected_creates.items()]
    return pods, foreign


def _placeholder(name: str, template: str | None) -> PodInfo:
    """A pod we created and the watch has not shown yet: Pending, of the template we sent,
    so nothing creates it twice nor takes it for an outdated one."""
    index = name.rsplit("-", 1)[-1]
    return PodInfo(name=name, index=int(index) if index.isdigit() else None, phase="Pending", ready=False,
                   terminating=False, disrupted=False, exit_code=None, reason="", template_hash=template, ip=None)


def _foreign_conflicts(foreign: list[PodInfo], job: str) -> dict[str, str]:
    return {p.name: f"pod {p.name} (owned by uid {p.owner_uid or 'nobody'})" for p in foreign
            if worker_index(p.name, job) is not None and not p.terminating}



def _describe(kind: str, obj: dict) -> str:
    meta = obj.get("metadata") or {}
    owner = next((f"{r.get('kind')} {r.get('name')}" for r in meta.get("ownerReferences") or []), "no owner")
    return f"{kind.lower()} {meta.get('name')} ({owner})"


def _document(body: kopf.Body) -> dict:
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
            "metadata": {"name": body.metadata.name, "namespace": body.metadata.namespace},
            "spec": dict(body.get("spec") or {})}

