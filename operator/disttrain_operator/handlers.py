"""kopf handlers: glue only. The loop of each job lives in controller.py, the decisions
in plan.py.

- `worker_pods` indexes our pods (server-side label filter) by (namespace, job); kopf
  fills the index before any daemon starts, so a restarted operator sees every pod.
- `pod_changed` / `job_changed` wake the job's loop: reactions take milliseconds, not a timer.
- `run_job` is one loop per job (`controller.run_job`); `watch_progress` reads the trainer's
  /status on its own loop. Both are kopf daemons, so peering pauses them; they end
  themselves when the job is deleted (`Shared.bury`).
- Jobs carry no finalizer (`daemons_without_finalizer`): kopf would add one for its
  daemons, which costs a write per job and leaves a job undeletable while no operator
  runs; nothing has to happen before a job goes (its children go by owner references).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import kopf

from .api.names import JOB_LABEL
from .api.types import GROUP, PLURAL, VERSION
from .controller import Shared, poll_progress, run_job
from .kube import Kube, login
from .metrics import OperatorMetrics
from .plan import Policy
from .pods import summarize_pod
from .settings import Settings, configure_kopf, platform_policies


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    ours = Settings.from_env()
    pod_policy, network_policy = platform_policies()
    configure_kopf(settings, ours)
    logger.info(f"pod policy for podTemplate settings that leave the sandbox: {pod_policy.describe()}")
    metrics = OperatorMetrics()
    kube = Kube(login(), qps=ours.api_qps, burst=ours.api_burst,
                on_answer=lambda verb, code: metrics.api_requests.labels(verb=verb, code=str(code)).inc())
    memo.shared = Shared(
        settings=ours, kube=kube, metrics=metrics,
        policy=Policy(backoff_base_seconds=ours.restart_backoff_seconds,
                      backoff_max_seconds=ours.restart_backoff_max_seconds),
        pod_policy=pod_policy, network_policy=network_policy)
    if ours.metrics_port:
        metrics.serve(ours.metrics_port)
        logger.info(f"metrics on :{ours.metrics_port}/metrics")


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    await memo.shared.kube.close()


@kopf.on.login()
def credentials(**_: Any) -> kopf.ConnectionInfo:
    """kopf's own minimal login (service account, else kubeconfig): the operator never
    imports the official client."""
    return login()


@kopf.index("pods", labels={JOB_LABEL: kopf.PRESENT})
async def worker_pods(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict:
    return {(namespace, labels[JOB_LABEL]): summarize_pod(body)}


@kopf.on.event("pods", labels={JOB_LABEL: kopf.PRESENT})
async def pod_changed(namespace: str, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    memo.shared.wake((namespace, labels[JOB_LABEL]))


@kopf.on.event(GROUP, VERSION, PLURAL)
async def job_changed(namespace: str, name: str, body: kopf.Body, type: str | None, memo: kopf.Memo,
                      **_: Any) -> None:
    memo.shared.job_event((namespace, name), body, type)


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10)
async def reconcile(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, worker_pods: kopf.Index,
                    **_: Any) -> None:
    await run_job(memo.shared, body, worker_pods, stopped)


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=5)
async def watch_progress(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, worker_pods: kopf.Index,
                         **_: Any) -> None:
    await poll_progress(memo.shared, body, worker_pods, stopped)



def daemons_without_finalizer(registry: kopf.OperatorRegistry) -> None:
    """kopf 1.45 has no public switch for this: its daemon handlers are frozen dataclasses
    with requires_finalizer=True. tests/unit/test_handlers.py checks that it holds."""
    spawning = registry._spawning  # noqa: SLF001
    spawning._handlers[:] = [dataclasses.replace(h, requires_finalizer=False)  # noqa: SLF001
                             for h in spawning._handlers]  # noqa: SLF001


daemons_without_finalizer(kopf.get_default_registry())
