"""kopf handlers: glue only. kopf watches the jobs and nodes; the work happens in
controller.py's queue.

- Our worker pods are not kopf's: the operator's own list and watch (informer.py) keeps a
  summary of each by (namespace, job), with the whole cluster in one watch under
  --all-namespaces (`memo.cluster_wide`, set by __main__), else one watch per namespace
  in which a job was seen; a job is reconciled once its namespace's pods are all listed,
  so the first pass of a restarted operator already sees every pod.
- `node_health` indexes every node's health (Ready, unreachable taints) by name, a few
  fields each; `node_changed` queues the jobs with workers on a node that was lost or
  came back (failures.py, recovery.lost_workers).
- `training_templates` and `cluster_training_templates` index both kinds of training
  template by (namespace, name), parsed (operator/template_watch.py); a change of one queues
  the jobs that name it.
- `job_changed` (and a changed pod, through the pod watch) put the job's key on the work
  queue: reactions take milliseconds, not a timer.
- `watch_integrations` registers the watches of each integration that is on
  (integrations/registry.py; one that is off, as the settings say, needs no right on its
  controller's objects, nor that controller installed): a change of one of their objects
  queues its job.
- `crd_changed` follows the CRDs of the watches above (crds.py): when one that was gone
  is back, kopf is started over (__main__.serve) so that it serves it again; the `crds`
  probe puts their state in the liveness answer.
- `start` builds the Controller in kopf's startup phase and runs its workers in the
  background (with leader election, only while this replica holds the Lease); `stop`
  ends them in kopf's cleanup phase.

No daemons, timers or finalizers: jobs carry no finalizer, so a job is deletable while no
operator runs, and nothing has to happen before it goes (its children go by owner
references).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import kopf

from disttrain.api.types import GROUP, PLURAL, VERSION
from disttrain.integrations.protocol import Integration
from disttrain.integrations.registry import REGISTRY
from disttrain.operator.controller import Controller
from disttrain.operator.crds import RESUME_SECONDS, CrdState
from disttrain.operator.informer import PodWatch
from disttrain.operator.kube import Kube, login
from disttrain.operator.leader import LeaderElector
from disttrain.operator.metrics import OperatorMetrics
from disttrain.operator.metrics_serving import MetricsServer, Reviewer
from disttrain.operator.core.state import Policy
from disttrain.operator.core.nodes import summarize_node
from disttrain.operator.template_watch import summarize as summarize_template
from disttrain.api.template_resolution import CLUSTER_TEMPLATE_KIND, PLURALS, TEMPLATE_KIND
from disttrain.operator.settings import Settings, configure_kopf, lease_settings, platform_policies


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger,
                node_health: kopf.Index, training_templates: kopf.Index, cluster_training_templates: kopf.Index,
                **indices: Any) -> None:
    ours = Settings.from_env()
    pod_policy, network_policy = platform_policies()
    configure_kopf(settings, ours)
    logger.info(f"pod policy for podTemplate settings that leave the sandbox: {pod_policy.describe()}")
    metrics = OperatorMetrics()
    kube = Kube(login(), qps=ours.api_qps, burst=ours.api_burst,
                on_answer=lambda verb, code: metrics.api_requests.labels(verb=verb, code=str(code)).inc())
    controller = Controller(
        settings=ours, kube=kube, metrics=metrics,
        policy=Policy(backoff_base_seconds=ours.restart_backoff_seconds,
                      backoff_max_seconds=ours.restart_backoff_max_seconds, node_rules=ours.node_rules()),
        pod_policy=pod_policy, network_policy=network_policy)
    pods = PodWatch(kube, on_change=controller.pod_event, on_synced=controller.pods_synced,
                    cluster_wide=bool(memo.get("cluster_wide")), clock=controller.clock)
    controller.pods_index, controller.pod_watch = pods.cache, pods
    pods.start()
    controller.nodes_index = node_health
    controller.templates.indexes = {TEMPLATE_KIND: training_templates, CLUSTER_TEMPLATE_KIND: cluster_training_templates}
    for integration in controller.integrations:
        integration.attach(indices)  # the indexes its watches keep (watch_integrations)
    memo.controller = controller
    memo.crds = CrdState(needed=frozenset(name for name, *_ in needed_crds(controller.integrations)))
    for name, group, version, plural in needed_crds(controller.integrations):
        if not await kube.served(group, version, plural):
            memo.crds.missing(name, time.monotonic())
            how = " (`disttrain crd | kubectl apply -f -` installs disttrain's, or the Helm chart)" \
                if group == GROUP else ""
            logger.warning(f"the CRD {name} is not installed: no {plural} are served until it is created{how} "
                           "(then this operator serves them at once)")
    memo.work = asyncio.create_task(_work(controller, ours, memo, logger))
    if ours.metrics_port:
        checked = ours.metrics_auth == "kubernetes"
        memo.metrics_server = MetricsServer(metrics.registry, Reviewer(kube) if checked else None)
        await memo.metrics_server.start(ours.metrics_port)
        if checked:
            logger.info(f"metrics on https://:{ours.metrics_port}/metrics, to callers allowed to get /metrics")
        else:
            logger.warning(f"metrics on http://:{ours.metrics_port}/metrics to anyone who reaches the port "
                           "(DISTTRAIN_METRICS_AUTH=none): they name every watched job")


def needed_crds(integrations: tuple[Integration, ...] | None = None) -> list[tuple[str, str, str, str]]:
    """(name, group, version, plural) of each CRD whose objects kopf watches for us: the
    jobs' and the training templates', and those of each integration that is on (None: of
    every integration)."""
    found = [(f"{plural}.{GROUP}", GROUP, VERSION, plural) for plural in (PLURAL, *PLURALS.values())]
    for integration in integrations if integrations is not None else tuple(kind() for kind in REGISTRY):
        if integrations is None or integration.on:
            found += [(crd.name, crd.group, crd.version, crd.plural) for crd in integration.crds]
    return found


async def _work(controller: Controller, ours: Settings, memo: kopf.Memo, logger: logging.Logger) -> None:
    """Run the workers; with leader election only once the Lease is ours, and stop the
    operator (through the embedding's stop flag) when the Lease is lost."""
    lease = lease_settings(ours)
    if lease is None:
        await controller.run(ours.workers)
        return
    elector = LeaderElector(controller.kube, lease, controller.clock)
    electing = asyncio.create_task(elector.run())
    logger.info(f"waiting to lead: Lease {lease.namespace}/{lease.name} as {elector.identity}")
    try:
        await asyncio.wait({electing, asyncio.create_task(elector.leading.wait())},
                           return_when=asyncio.FIRST_COMPLETED)
        if elector.leading.is_set():
            working = asyncio.create_task(controller.run(ours.workers))
            await asyncio.wait({electing, working}, return_when=asyncio.FIRST_COMPLETED)
            working.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await working
    finally:
        electing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await electing
    logger.error("leadership lost: stopping, so that this replica restarts as a standby")
    memo.leadership_lost = True
    stop_flag = getattr(memo, "stop_flag", None)  # set by __main__'s embedding
    if stop_flag is not None:
        stop_flag.set()


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    work: asyncio.Task[None] | None = getattr(memo, "work", None)
    if work is not None:
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
    await memo.controller.pod_watch.close()
    server: MetricsServer | None = getattr(memo, "metrics_server", None)
    if server is not None:
        await server.close()
    await memo.controller.kube.close()


@kopf.on.event("apiextensions.k8s.io", "v1", "customresourcedefinitions")
async def crd_changed(name: str, body: kopf.Body, type: str | None, memo: kopf.Memo, logger: logging.Logger,
                      **_: Any) -> None:
    crds: CrdState | None = getattr(memo, "crds", None)
    if crds is None or name not in crds.needed:
        return
    if not crds.seen(name, body, deleted=type == "DELETED", now=time.monotonic()):
        if type == "DELETED":
            logger.error(f"the CRD {name} was deleted, and every object of its kind with it: nothing of that "
                         "kind is served until it is created again (then this operator serves it at once)")
        return
    group, version, plural = next((g, v, p) for n, g, v, p in needed_crds() if n == name)
    for _attempt in range(int(RESUME_SECONDS)):  # discovery lists it a moment after Established
        if await memo.controller.kube.served(group, version, plural):
            break
        await asyncio.sleep(1.0)
    stop_flag = getattr(memo, "stop_flag", None)  # set by __main__'s embedding
    if stop_flag is None:
        logger.error(f"the CRD {name} is back: restart the operator to serve it")
        return
    logger.warning(f"the CRD {name} is back: starting over to serve it")
    memo.serve_again.set()
    stop_flag.set()


@kopf.on.probe(id="crds")
def crds_probe(memo: kopf.Memo, **_: Any) -> dict[str, str]:
    """Liveness: each CRD we watch, served or why not; fails once a CRD came back and was
    not served again in time."""
    crds: CrdState | None = getattr(memo, "crds", None)
    if crds is None:
        return {}
    stuck = crds.stuck(time.monotonic())
    if stuck:
        raise kopf.PermanentError(f"CRDs back but not served: {', '.join(stuck)}")
    return crds.describe()


@kopf.on.login()
def credentials(**_: Any) -> kopf.ConnectionInfo:
    """kopf's own minimal login (service account, else kubeconfig): the operator never
    imports the official client."""
    return login()


@kopf.index("nodes")
async def node_health(name: str, body: kopf.Body, **_: Any) -> dict:
    return {name: summarize_node(body)}


@kopf.on.event("nodes")
async def node_changed(name: str, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    memo.controller.node_event(name, deleted=type == "DELETED")


@kopf.index(GROUP, VERSION, "trainingtemplates")
async def training_templates(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict:
    return {(namespace, name): summarize_template(body)}


@kopf.index(GROUP, VERSION, "clustertrainingtemplates")
async def cluster_training_templates(name: str, body: kopf.Body, **_: Any) -> dict:
    return {(None, name): summarize_template(body)}


@kopf.on.event(GROUP, VERSION, "trainingtemplates")
async def training_template_changed(namespace: str, name: str, body: kopf.Body, type: str | None, memo: kopf.Memo,
                                    **_: Any) -> None:
    memo.controller.templates.event(TEMPLATE_KIND, namespace, name, type == "DELETED", body.get("metadata", {}).get("uid"))


@kopf.on.event(GROUP, VERSION, "clustertrainingtemplates")
async def cluster_training_template_changed(name: str, body: kopf.Body, type: str | None, memo: kopf.Memo,
                                            **_: Any) -> None:
    memo.controller.templates.event(CLUSTER_TEMPLATE_KIND, None, name, type == "DELETED",
                                    body.get("metadata", {}).get("uid"))


@kopf.on.event(GROUP, VERSION, PLURAL)
async def job_changed(namespace: str, name: str, body: kopf.Body, type: str | None, memo: kopf.Memo,
                      **_: Any) -> None:
    memo.controller.job_event((namespace, name), body, type)


def watch_integrations(settings: Settings) -> None:
    """Register the watches of each integration that is on (__main__ calls this before
    kopf starts): a change of one of their objects queues its job."""
    for integration in (kind.of(settings) for kind in REGISTRY):
        if integration.on:
            integration.watch(_integration_changed)


def _integration_changed(memo: kopf.Memo, key: tuple[str, str]) -> None:
    memo.controller.pod_event(key)
