"""Creating what a job owns, in the background, and what a refusal or a taken name does.

A pass plans which workers to create (plan.create); `Children.start` sends the job's owned
objects (the Service, its NetworkPolicy and PodDisruptionBudget, an integration's
children) and then the pods, paced as one batch, while the worker that planned them goes
on to other jobs. Admission, quota or validation saying no is a Refusal said on the job
and retried with back-off; a name held by a stranger is a NameConflict.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from disttrain.api.names import worker_name
from disttrain.integrations.protocol import Placement
from disttrain.integrations.registry import owned_children, render_pod
from disttrain.operator.core.failures import avoiding
from disttrain.operator.core.integration import Joined
from disttrain.operator.core.plan import refusal_retry_seconds
from disttrain.operator.core.pods import controller_uid
from disttrain.operator.core.state import JobState, Plan, Refusal
from disttrain.operator.kube import ApiError, kind_of
from disttrain.operator.record import JobRecord, Key, describe
from disttrain.render import TEMPLATE_HASH_ANNOTATION, template_hash

if TYPE_CHECKING:
    from disttrain.operator.controller import Controller

log = logging.getLogger("disttrain.controller")

CREATED, OURS, TAKEN = "created", "ours", "taken"


class Children:
    """The creating half of the controller's shell (`shell`: its kube, clock, queue, metrics
    and integrations, and `spawn` for background work)."""

    def __init__(self, shell: Controller):
        self.shell = shell

    async def placement(self, joined: tuple[Joined, ...]) -> Placement:
        """Where the workers go: the node labels and tolerations of every integration's
        admission (a queue's flavors), merged in the registry's order."""
        placement = Placement()
        parts = {part.integration: part for part in joined}
        for integration in self.shell.integrations:
            part = parts.get(integration.name)
            found = await integration.placement(self.shell, part) if part is not None else None
            if found is not None:
                placement = placement.merged(found)
        return placement

    def refusal_hints(self, child: dict) -> Mapping[int, str] | None:
        """The fix to name when the API refuses a child of a kind an integration adds, by
        KIND.GROUP, else by kind (None: a refusal of it fails the pass, as for any call)."""
        return next((integration.refusal_hints[kind] for kind in (kind_of(child), child["kind"])
                     for integration in self.shell.integrations if kind in integration.refusal_hints), None)

    def start(self, plan: Plan, job: JobState, view: Any, rec: JobRecord) -> None:
        """Create the planned children in the background: creates are paced (one token per
        write, for the whole operator), and a worker that waited for them would hold every
        other job's status back behind this job's pods. The pods count as present (Pending,
        of the template sent) from now on, so no pass creates them twice; one whose creation
        fails stops counting and the job is queued again."""
        # The job as stored: its uid (owner references) and labels (an integration's shape reads them).
        owned = dataclasses.replace(job.validation.job, uid=view.uid, labels=dict(view.labels))
        template = template_hash(job.validation.job, job.validation.resolved)
        for index in plan.create:
            rec.expect_create(worker_name(job.name, index), template, self.shell.clock.monotonic())
        rec.creating = True
        self.shell.spawn(self._create_all(owned, job.validation.resolved, list(plan.create), (job.namespace, job.name),
                                          rec, avoiding(plan.status.avoided_nodes), job.joined))

    async def _create_all(self, owned: Any, resolved: Any, indices: list[int], key: Key, rec: JobRecord,
                          avoid_nodes: tuple[str, ...] = (), joined: tuple[Joined, ...] = ()) -> None:
        """What the job owns besides its pods (render_owned's order; restored if someone
        deleted them), then the pods, in index order, paced as one batch; a refused pod
        stops the batch and is said on the job, a name held by a stranger is a NameConflict. Each pod is rendered just
        before it is sent: hundreds of jobs waiting for their turn hold no manifests."""
        left = list(indices)
        try:
            shell = self.shell
            placement = await self.placement(joined)
            children = owned_children(owned, resolved, shell.network_policy, shell.integrations)
            # Every write of the batch paid for at once: one left out waits for its own token
            # behind every other job's batch (at 2,000 jobs, a job's last pod came 7 minutes
            # after the others).
            async with shell.kube.creating(len(children) + len(indices)):
                if not await self._owned(children, rec, key, owned.uid):
                    return
                while left:
                    pod = placement.mark(render_pod(owned, resolved, left[0], avoid_nodes,
                                                    node_selector=placement.node_selector,
                                                    tolerations=placement.tolerations, among=shell.integrations))
                    try:
                        outcome = await self._create(pod, rec, owned.uid)
                    except ApiError as exc:
                        self.refused(rec, key, pod["metadata"]["name"], exc)
                        return
                    left.pop(0)
                    rec.refusal, rec.refusals = None, 0
                    if outcome == TAKEN:
                        rec.expected_creates.pop(pod["metadata"]["name"], None)
                        shell.queue.add(key)
                    elif outcome == CREATED:
                        shell.metrics.pods_created.inc()
                        log.info("%s/%s: created pod %s", *key, pod["metadata"]["name"])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001  (a failed creation is retried like a failed pass)
            reason = f"Api{exc.status}" if isinstance(exc, ApiError) else type(exc).__name__
            self.shell.metrics.reconcile_errors.labels(reason=reason).inc()
            delay = self.shell.queue.add_rate_limited(key)
            log.warning("creating the children of %s/%s failed (%s); retrying in %.1fs: %s", *key, reason, delay, exc,
                        exc_info=not isinstance(exc, ApiError))
        finally:
            for index in left:  # not created: they no longer count as present
                rec.expected_creates.pop(worker_name(owned.name, index), None)
            rec.creating = False

    async def _owned(self, children: list[dict], rec: JobRecord, key: Key, uid: str) -> bool:
        """Each owned object there, or created; False: the batch stops (a stranger holds a
        name, or the API refused one of an integration's kinds: said on the job)."""
        for child in children:
            try:
                if not await self._ensure(child, rec, uid):
                    self.shell.queue.add(key)  # the conflict goes into status next pass
                    return False
            except ApiError as exc:
                hints = self.refusal_hints(child)
                if hints is None:  # a refused kind of an integration's (its CRD missing) is said on the job
                    raise
                self.refused(rec, key, f"{child['kind']} {child['metadata']['name']}", exc, hints)
                return False
        return True

    def refused(self, rec: JobRecord, key: Key, what: str, exc: ApiError, hints: Mapping[int, str] = {}) -> None:
        """Admission, quota, validation (or a missing kind) said no to a creation: say so
        on the job (next pass) and retry after a growing back-off (a quota may free up, a
        label change). Errors of the API server itself are raised, as for any pass."""
        if exc.transient or exc.status in (401,):
            raise exc
        rec.refusals += 1
        message = f"{exc.message}; {hints[exc.status]}" if exc.status in hints else exc.message
        rec.refusal = Refusal(pod=what, code=exc.status, reason=exc.reason, message=message)
        rec.refused_until = self.shell.clock.monotonic() + refusal_retry_seconds(rec.refusals)
        self.shell.queue.add(key)

    async def _create(self, obj: dict, rec: JobRecord, uid: str) -> str:
        """Create: CREATED; a 409 is fine when the holder is ours (OURS: the watch has not
        shown it yet), and a NameConflict when it is not (TAKEN)."""
        name = obj["metadata"]["name"]
        result = await self.shell.kube.create(obj)
        if result.created:
            if obj["kind"] == "Pod":
                annotations = obj["metadata"].get("annotations") or {}
                rec.expect_create(name, annotations.get(TEMPLATE_HASH_ANNOTATION), self.shell.clock.monotonic())
            return CREATED
        existing = result.existing or {}
        if controller_uid(existing.get("metadata") or {}) == uid:
            return OURS
        if existing:
            rec.conflicts[name] = (kind_of(obj), describe(obj["kind"], existing))
        return TAKEN

    async def _ensure(self, obj: dict, rec: JobRecord, uid: str) -> bool:
        """The Service and the NetworkPolicy are not watched: on every pass that creates pods
        (a start, a restart round) look the name up, and create it when it is missing, so
        recreated workers always find their rendezvous host. False: a stranger holds it."""
        kind, name = kind_of(obj), obj["metadata"]["name"]
        existing = await self.shell.kube.get(obj["metadata"]["namespace"], kind, name)
        if existing is None:
            return await self._create(obj, rec, uid) != TAKEN
        if controller_uid(existing.get("metadata") or {}) == uid:
            return True
        rec.conflicts[name] = (kind, describe(kind, existing))
        return False

    async def recheck_conflicts(self, namespace: str, rec: JobRecord) -> None:
        """A squatter found through a 409 is looked at again: once it is gone the name is free."""
        for name, (kind, _who) in list(rec.conflicts.items()):
            if await self.shell.kube.get(namespace, kind, name) is None:
                del rec.conflicts[name]
