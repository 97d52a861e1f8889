"""Operator settings: everything configurable lives in one startup handler.

Environment (the Deployment and the chart set these):
  DISTTRAIN_OPERATOR_METRICS_PORT   Prometheus /metrics port (default 8080; 0 turns it off)
  DISTTRAIN_RESTART_BACKOFF_SECONDS first back-off before recreating a failed worker (10)
  DISTTRAIN_RESTART_BACKOFF_MAX_SECONDS  cap of the exponential back-off (300)
  DISTTRAIN_LOG_FORMAT              plain | json (default plain; read by __main__, see logformat.py)
Timer intervals (DISTTRAIN_RESYNC_SECONDS, DISTTRAIN_PROGRESS_SECONDS) are read by
handlers.py when the handlers are registered.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from typing import Any

import kopf
from kubernetes import client, config

from .api.names import FINALIZER
from .api.types import GROUP
from .kube import Kube
from .metrics import OperatorMetrics
from .plan import Policy


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r} is not a number: set it to seconds, e.g. {default}") from None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]
    # Ride out an overloaded API server (429s) for minutes: when kopf gives up on a
    # status patch, it leaves the object alone until the object changes again.
    settings.networking.error_backoffs = [1, 2, 3, 5, 8, 13, 21, 34, 55]
    settings.execution.max_workers = 16

    memo.kube = Kube(_api_client())
    memo.policy = Policy(
        backoff_base_seconds=env_float("DISTTRAIN_RESTART_BACKOFF_SECONDS", 10.0),
        backoff_max_seconds=env_float("DISTTRAIN_RESTART_BACKOFF_MAX_SECONDS", 300.0))
    memo.locks = collections.defaultdict(threading.Lock)
    memo.staleness = {}
    memo.metrics = OperatorMetrics()
    port = int(env_float("DISTTRAIN_OPERATOR_METRICS_PORT", 8080))
    if port:
        memo.metrics.serve(port)
        logger.info(f"metrics on :{port}/metrics")


def _api_client() -> client.ApiClient:
    """In-cluster credentials when running as a pod, else the kubeconfig (development)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()
