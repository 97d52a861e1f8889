"""Operator settings: one documented dataclass, read once from the environment at start-up
(the Deployment and the chart set these variables), and kopf's own settings beside it.

DISTTRAIN_LOG_FORMAT (plain | json) is read by __main__ and handed to kopf's own
--log-format (logformat.py). The platform's policies have their own parsers beside the code they configure:
  DISTTRAIN_POD_POLICY_ALLOW_ALL, DISTTRAIN_POD_POLICY_ALLOW_NAMESPACES
      podTemplate settings that leave the sandbox (api/policy.py)
  DISTTRAIN_NETWORK_POLICY, DISTTRAIN_NETWORK_POLICY_METRICS_FROM, DISTTRAIN_OPERATOR_NAMESPACE
      a NetworkPolicy per job (render/network_policy.py)
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, fields
from typing import Any

import kopf

from .api.bounds import RECURSION_LIMIT
from .api.names import FINALIZER, JOB_LABEL
from .api.policy import PodPolicy, pod_policy_from_env
from .api.types import GROUP
from .render.network_policy import NetworkPolicySettings, network_policy_from_env


@dataclass(frozen=True, slots=True)
class Settings:
    metrics_port: int = 8080
    """DISTTRAIN_OPERATOR_METRICS_PORT: Prometheus /metrics port; 0 turns it off."""
    restart_backoff_seconds: float = 10.0
    """DISTTRAIN_RESTART_BACKOFF_SECONDS: first back-off before recreating a crashed worker."""
    restart_backoff_max_seconds: float = 300.0
    """DISTTRAIN_RESTART_BACKOFF_MAX_SECONDS: cap of that exponential back-off."""
    resync_seconds: float = 60.0
    """DISTTRAIN_RESYNC_SECONDS: safety resync of a job with nothing happening (events
    wake a job at once; this only bounds how long a missed event could go unnoticed)."""
    progress_seconds: float = 15.0
    """DISTTRAIN_PROGRESS_SECONDS: how often a running trainer's /status is read."""
    api_qps: float = 50.0
    """DISTTRAIN_API_QPS: writes per second to the API server, for the whole operator."""
    api_burst: int = 100
    """DISTTRAIN_API_BURST: writes allowed at once before the QPS pacing applies."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = ENV_NAMES[f.name]
            raw = env.get(name, "")
            if raw == "":
                continue
            kind = type(f.default)
            try:
                values[f.name] = kind(float(raw)) if kind in (int, float) else raw
            except ValueError:
                raise SystemExit(f"{name}={raw!r} is not a number: set it like {name}={f.default}") from None
        settings = cls(**values)
        if settings.api_qps <= 0 or settings.api_burst < 1:
            raise SystemExit("DISTTRAIN_API_QPS must be > 0 and DISTTRAIN_API_BURST >= 1")
        return settings


def platform_policies(env: dict[str, str] | None = None) -> tuple[PodPolicy, NetworkPolicySettings | None]:
    """The pod policy and the per-job NetworkPolicy settings; a bad value stops the operator
    with the variable named."""
    env = dict(os.environ if env is None else env)
    try:
        return pod_policy_from_env(env), network_policy_from_env(env)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


ENV_NAMES = {"metrics_port": "DISTTRAIN_OPERATOR_METRICS_PORT",
             **{f.name: f"DISTTRAIN_{f.name.upper()}" for f in fields(Settings) if f.name != "metrics_port"}}


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff-base (a deep copy of the whole body, status included) for every
    event of every watched object, to feed on.create/on.update handlers. We have none:
    the job's loop compares what it needs itself. At 500 jobs x 8 pods that copy was a
    seventh of the operator's CPU; here it costs nothing and nothing is stored."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


def configure_kopf(settings: kopf.OperatorSettings, ours: Settings) -> None:
    # Deep objects stored under an older, looser CRD must decode, so validation can say
    # what is wrong with that one job (see __main__.RECURSION_LIMIT; also for `kopf run`).
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    # Jobs get no finalizer (handlers.daemons_without_finalizer); kopf still removes this
    # one from jobs an older operator marked, when they are deleted.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # Only our worker pods are watched, filtered by the API server (not every pod).
    settings.watching.label_selectors["v1", "pods"] = JOB_LABEL
    settings.networking.error_backoffs = [1, 2, 3, 5, 8, 13, 21, 34, 55]
    # kopf logs "Handler ... succeeded" for every pod and job event at INFO: at 500 jobs that
    # is most of the log and a good share of the CPU. Our own lines say what was done.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
