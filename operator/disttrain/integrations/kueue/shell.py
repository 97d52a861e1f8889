"""The Kueue integration's shell: the Workload watch, what a pass reads (the job's
Workload, the ClusterQueue its LocalQueue feeds, the flavors of its admission) and the
Workload writes a pass asks for (admission.py's steps). workload.py is the protocol.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from disttrain.api.names import JOB_LABEL
from disttrain.api.times import iso
from disttrain.integrations.kueue import workload as kueue
from disttrain.integrations.kueue.admission import (CAUSES, NAME, STEP_ORDER, ActivateWorkload, CreateSlice,
                                                    CreateWorkload, DeleteWorkload, FinishWorkload, PublishCheckpoint,
                                                    Queued, QueueIgnored, ReleaseWorkload, Unqueued, SetPodsReady,
                                                    ShrinkWorkload)
from disttrain.integrations.protocol import Crd, Integration, Key, Placement, Setting, Shell, Use, dressed
from disttrain.operator.core.integration import Joined, Step
from disttrain.operator.core.state import JobState
from disttrain.render import render_pod, template_hash

log = logging.getLogger("disttrain.kueue")

WORKLOAD, FLAVOR, LOCAL_QUEUE = (f"Workload.{kueue.GROUP}", f"ResourceFlavor.{kueue.GROUP}",
                                 f"LocalQueue.{kueue.GROUP}")
INDEX = "job_workloads"  # kopf's index of our Workloads by (namespace, job)
LOCAL_QUEUE_SECONDS = 60.0  # a LocalQueue's ClusterQueue is read again at most this often
# What Kueue reads besides the Workload when it sizes it: the claim templates of its pods.
SIZED_FROM = frozenset({"ResourceClaimTemplate"})

# What to do when the API refuses a job's Workload.
WORKLOAD_HINTS = {
    404: "the Workload kind is not served: install Kueue (v0.19 or later), or remove the label "
         "kueue.x-k8s.io/queue-name",
    403: "the operator may not create Workloads: install the chart with kueue.enabled=true (or apply "
         "manifests/rbac/kueue.yaml), or remove the label kueue.x-k8s.io/queue-name",
}


SETTING = """DISTTRAIN_KUEUE: jobs labelled kueue.x-k8s.io/queue-name wait for Kueue's admission
(a Workload each; the chart's kueue.enabled sets it and grants the RBAC). Off, the label
is ignored with a Warning Event on the job."""


class Kueue(Integration):
    """Jobs labelled kueue.x-k8s.io/queue-name wait for Kueue's admission (DISTTRAIN_KUEUE)."""

    name: ClassVar[str] = NAME
    feature: ClassVar[str] = NAME
    uses: ClassVar[tuple[Use, ...]] = (
        Use(kueue.GROUP, "workloads", "list watch create get patch delete", "watched",
            "the job's Workload: created, activated or deactivated, deleted"),
        Use(kueue.GROUP, "workloads/status", "update", "watched", "releases the quota of a finished or stopped job"),
        Use(kueue.GROUP, "localqueues", "get", "watched", "names the ClusterQueue a job waits in"),
        Use(kueue.GROUP, "resourceflavors", "get", "cluster", "where an admitted job's workers go"),
        Use(kueue.GROUP, "workloadpriorityclasses", "get", "cluster", "a Workload's priority"),
        Use("scheduling.k8s.io", "priorityclasses", "get", "cluster", "a Workload's priority"),
    )
    crds: ClassVar[tuple[Crd, ...]] = (Crd(kueue.GROUP, kueue.VERSION, "workloads"),)
    paths: ClassVar[Mapping[str, str]] = {
        WORKLOAD: f"/apis/{kueue.API_VERSION}/namespaces/{{ns}}/workloads",
        LOCAL_QUEUE: f"/apis/{kueue.API_VERSION}/namespaces/{{ns}}/localqueues",
        FLAVOR: f"/apis/{kueue.API_VERSION}/resourceflavors",
        f"WorkloadPriorityClass.{kueue.GROUP}": f"/apis/{kueue.API_VERSION}/workloadpriorityclasses",
        "PriorityClass.scheduling.k8s.io": "/apis/scheduling.k8s.io/v1/priorityclasses",
    }
    refusal_hints: ClassVar[Mapping[str, Mapping[int, str]]] = {"Workload": WORKLOAD_HINTS}

    settings: ClassVar[tuple[Setting, ...]] = (Setting("kueue", False, SETTING),)
    causes: ClassVar[tuple[str, ...]] = CAUSES

    def __init__(self, enabled: bool = False):
        self.enabled = enabled
        self.index: Any = None  # kopf's index of our Workloads by (namespace, job)
        self._local_queues: dict[Key, tuple[str | None, float]] = {}  # -> (its ClusterQueue, read again after)

    @classmethod
    def of(cls, settings: Any) -> Kueue:
        return cls(enabled=bool(settings.kueue))

    @property
    def on(self) -> bool:
        return self.enabled

    @classmethod
    def queue_of(cls, labels: Mapping[str, str] | None) -> str | None:
        return kueue.queue_of(labels)

    @classmethod
    def held(cls, queue: str) -> str | None:
        return (f"Kueue LocalQueue {queue} ({kueue.QUEUE_LABEL}): held, no worker created, until Kueue admits its "
                "Workload (an operator run with DISTTRAIN_KUEUE)")

    def watch(self, queue_job: Callable[[Any, Key], None]) -> None:
        """Index the Workloads this operator makes by their job, and queue the job when
        Kueue changes one."""
        import kopf

        @kopf.index(kueue.GROUP, kueue.VERSION, "workloads", labels={JOB_LABEL: kopf.PRESENT}, id=INDEX)
        async def job_workloads(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict:
            return {(namespace, labels[JOB_LABEL]): kueue.view_of(body)}

        @kopf.on.event(kueue.GROUP, kueue.VERSION, "workloads", labels={JOB_LABEL: kopf.PRESENT},
                       id="workload_changed")
        async def workload_changed(namespace: str, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
            queue_job(memo, (namespace, labels[JOB_LABEL]))

    def attach(self, indices: Mapping[str, Any]) -> None:
        self.index = indices.get(INDEX)

    async def observe(self, shell: Shell, key: Key, view: Any) -> Joined | None:
        queue = kueue.queue_of(view.labels)
        if queue is None:  # only Kueue places by topology: a job that asks for one waits for a queue
            return Unqueued() if ((view.spec or {}).get("scheduling") or {}).get("topology") else None
        if not self.enabled:
            return QueueIgnored(queue=queue)
        own = self._own(key, view.uid)
        workload, growth = kueue.current_and_growth(own)
        cluster_queue = (await self._cluster_queue(shell, key[0], queue)
                         if workload is not None and not workload.admitted else None)
        return Queued(queue=queue, workload=workload, cluster_queue=cluster_queue, growth=growth,
                      slices=kueue.slices_made(own))

    def _own(self, key: Key, uid: str) -> list[kueue.WorkloadView]:
        """The job's own Workloads (its slices too) as the watch shows them."""
        try:
            found = list(self.index.get(key, [])) if self.index is not None else []
        except (KeyError, TypeError):
            return []
        return [w for w in found if w.owner_uid == uid]

    async def _cluster_queue(self, shell: Shell, namespace: str, queue: str) -> str | None:
        """The ClusterQueue a LocalQueue feeds, for the words of a waiting job; read at most
        once a minute per LocalQueue (None: it does not exist, Kueue says so itself)."""
        now = shell.clock.monotonic()
        known = self._local_queues.get((namespace, queue))
        if known is None or now >= known[1]:
            found = await shell.kube.get(namespace, LOCAL_QUEUE, queue)
            known = ((found or {}).get("spec") or {}).get("clusterQueue"), now + LOCAL_QUEUE_SECONDS
            self._local_queues[(namespace, queue)] = known
        return known[0]

    async def placement(self, shell: Shell, joined: Joined) -> Placement | None:
        """Where an admitted job's workers go: its ResourceFlavors read now (a flavor
        changed since the admission is taken as it is)."""
        wl = joined.workload if isinstance(joined, Queued) else None
        if wl is None or not wl.admitted:
            return None
        flavors = {}
        for name in sorted(set(wl.flavors.values())):
            flavors[name] = await shell.kube.get("", FLAVOR, name) or {}
        return kueue.placement_of(wl, flavors)

    async def carry_out(self, shell: Shell, record: Any, job: JobState, view: Any, joined: Joined,
                        steps: list[Step]) -> None:
        """The Workload steps of the plan, in STEP_ORDER."""
        if not isinstance(joined, Queued):
            return
        wl, ns, kube = joined.workload, job.namespace, shell.kube
        now = iso(shell.clock.now())
        for step in sorted(steps, key=lambda s: STEP_ORDER.index(type(s))):
            if isinstance(step, CreateWorkload):
                if job.validation.ok:
                    await self._create_workload(shell, record, job, view, joined.queue)
                continue
            if isinstance(step, DeleteWorkload) and step.name is not None:
                await kube.delete(ns, WORKLOAD, step.name)
                continue
            if wl is None:
                continue
            if isinstance(step, CreateSlice):
                if job.validation.ok:
                    await self._create_workload(shell, record, job, view, joined.queue,
                                                kueue.Slice(number=step.number, replaces=step.replaces))
            elif isinstance(step, ShrinkWorkload):
                body = await kube.get(ns, WORKLOAD, wl.name)
                patch = kueue.shrunk(body, step.count) if body is not None else None
                if patch is not None:
                    await kube.patch(ns, WORKLOAD, wl.name, patch)
                    log.info("%s/%s: Workload %s shrunk to %d workers: the rest of its quota goes back to Kueue",
                             ns, job.name, wl.name, step.count)
            elif isinstance(step, DeleteWorkload):
                await kube.delete(ns, WORKLOAD, wl.name)
            elif isinstance(step, ActivateWorkload):
                await kube.patch(ns, WORKLOAD, wl.name, {"spec": {"active": step.active}})
            elif isinstance(step, PublishCheckpoint):
                await kube.patch(ns, WORKLOAD, wl.name, kueue.checkpoint_annotations(step.step, step.time))
            elif isinstance(step, ReleaseWorkload):
                await self._update_workload(shell, job, wl.name, lambda body: kueue.release(body, now))
            elif isinstance(step, SetPodsReady):
                ready, reason = step.ready, step.reason
                await self._update_workload(shell, job, wl.name,
                                            lambda body: kueue.pods_ready(body, ready, reason, now))
            elif isinstance(step, FinishWorkload):
                succeeded, message = step.succeeded, step.message
                await self._update_workload(shell, job, wl.name,
                                            lambda body: kueue.finish(body, succeeded, message, now))

    async def _create_workload(self, shell: Shell, record: Any, job: JobState, view: Any, queue: str,
                               growth: kueue.Slice | None = None) -> None:
        """Make the job's Workload (or a growth slice of it), with its priority read from
        the class that sets it; a class that does not exist is said on the job
        (PodCreationForbidden) and retried."""
        key = (job.namespace, job.name)
        if shell.refused_lately(record):
            return  # refused lately: the job's pass after the back-off tries again
        owned = dataclasses.replace(job.validation.job, uid=view.uid)
        resolved = job.validation.resolved
        priority = None
        source = kueue.priority_source(owned, view.labels)
        if source is not None:
            kind, name = source
            found = await shell.kube.get("", f"{kind}.{kueue.priority_class_group(kind)}", name)
            if found is None:  # said on the job and retried after the refusals' back-off
                where = ("spec.scheduling.priorityClassName" if kind == "PriorityClass"
                         else f"the label {kueue.PRIORITY_LABEL}")
                shell.refuse(record, key, f"the Workload of {job.name}", 404, "NotFound",
                             f"{kind} {name!r} (from {where}) does not exist", {404: f"create it, or change {where}"})
                return
            priority = kueue.Priority(kind=kind, name=name, value=int(found.get("value") or 0))
        if not await self._named_by_pod(shell, record, key, owned, resolved):
            return
        pod = dressed(render_pod(owned, resolved, 0), owned, shell.integrations)  # as the workers will be
        body = kueue.render_workload(owned, resolved, pod, queue, priority,
                                     template_hash(job.validation.job, resolved), growth)
        if await shell.create_or_refuse(record, key, body, WORKLOAD_HINTS):
            log.info("%s/%s: created Workload %s in LocalQueue %s", *key, body["metadata"]["name"], queue)

    async def _named_by_pod(self, shell: Shell, record: Any, key: Key, owned: Any, resolved: Any) -> bool:
        """The children Kueue reads when it sizes the Workload, made before it: the
        ResourceClaimTemplates its pod names (Kueue counts their devices against the quota;
        one missing makes the Workload inadmissible). False: one was refused (said on the job)."""
        for integration in shell.integrations:
            for child in integration.children(owned, resolved):
                if child["kind"] in SIZED_FROM and not await shell.create_or_refuse(
                        record, key, child, integration.refusal_hints.get(child["kind"], {})):
                    if shell.refused_lately(record):
                        return False
        return True

    async def _update_workload(self, shell: Shell, job: JobState, name: str, change: Any) -> None:
        """Read the Workload, change its status (kueue.release, pods_ready, finish), write it with
        its resourceVersion; when Kueue wrote it meanwhile, the job's next pass tries again."""
        body = await shell.kube.get(job.namespace, WORKLOAD, name)
        status = change(body) if body is not None else None
        if status is None:
            return
        if await shell.kube.replace({**body, "status": status}, "status") is None:  # type: ignore[dict-item]
            shell.look_again((job.namespace, job.name))
