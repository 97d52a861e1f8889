"""Operator settings: one documented dataclass, read once from the environment at start-up
(the Deployment and the chart set these variables), and kopf's own settings beside it.

DISTTRAIN_LOG_FORMAT (plain | json) is read by __main__ and handed to kopf.configure
(logformat.py). The platform's policies have their own parsers beside the code they configure:
  DISTTRAIN_POD_POLICY_ALLOW_ALL, DISTTRAIN_POD_POLICY_ALLOW_NAMESPACES
      podTemplate settings that leave the sandbox (api/policy.py)
  DISTTRAIN_NETWORK_POLICY, DISTTRAIN_NETWORK_POLICY_METRICS_FROM, DISTTRAIN_OPERATOR_NAMESPACE
      a NetworkPolicy per job (render/network_policy.py)
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

import kopf

from disttrain.api.bounds import RECURSION_LIMIT
from disttrain.api.names import FINALIZER
from disttrain.api.policy import PodPolicy, pod_policy_from_env
from disttrain.api.types import DEFAULT_IMAGE, GROUP
from disttrain.integrations.registry import REGISTRY
from disttrain.operator.leader import LeaseSettings
from disttrain.operator.metrics_serving import AUTH_MODES
from disttrain.operator.core.backoff import exponential
from disttrain.operator.core.nodes import DEFAULT_UNHEALTHY_CONDITIONS, NodeRules
from disttrain.render.network_policy import NetworkPolicySettings, network_policy_from_env


@dataclass(frozen=True, slots=True)
class CoreSettings:
    """The operator's own settings; Settings adds each integration's (Integration.settings)."""

    metrics_port: int = 8080
    """DISTTRAIN_OPERATOR_METRICS_PORT: Prometheus /metrics port; 0 turns it off."""
    metrics_auth: str = "kubernetes"
    """DISTTRAIN_METRICS_AUTH: kubernetes: /metrics over HTTPS to callers whose bearer token
    the API server accepts and allows to get /metrics (the ClusterRole
    disttrain-operator-metrics-reader); none: plain HTTP to anyone who reaches the port."""
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
    workers: int = 16
    """DISTTRAIN_WORKERS: jobs reconciled at once (each by one worker of the work queue);
    a fourth as many read the trainers' /status."""
    leader_election: bool = False
    """DISTTRAIN_LEADER_ELECTION: replicas elect one active operator on a Lease (true in the
    chart and manifests); off, this replica works alone."""
    lease_name: str = "disttrain-operator"
    """DISTTRAIN_LEASE_NAME: the coordination.k8s.io Lease the replicas elect a leader on."""
    lease_namespace: str = ""
    """DISTTRAIN_LEASE_NAMESPACE: where that Lease lives; empty: the operator's own namespace
    (DISTTRAIN_OPERATOR_NAMESPACE, else its service account's)."""
    lease_seconds: float = 15.0
    """DISTTRAIN_LEASE_SECONDS: a standby takes over when the leader has not renewed the
    Lease for this long."""
    trainer_image: str = DEFAULT_IMAGE
    """DISTTRAIN_TRAINER_IMAGE: the image of a job that sets no spec.image, and the one
    instrument: auto copies disttrain from (the chart's trainerImage: your registry's copy of
    the trainer image). A job keeps the image it was first given (status.resolved.image)."""
    unhealthy_node_conditions: str = DEFAULT_UNHEALTHY_CONDITIONS
    """DISTTRAIN_UNHEALTHY_NODE_CONDITIONS: node conditions (TYPE=STATUS, comma-separated)
    that make a Ready node unhealthy: its workers move off it, checkpoint first, and the job
    avoids it (the chart's nodeHealth.conditions); none: no condition counts."""
    unhealthy_node_taints: str = ""
    """DISTTRAIN_UNHEALTHY_NODE_TAINTS: taint keys (comma-separated) whose NoSchedule or
    NoExecute taint makes a node unhealthy the same way, e.g. a GPU health controller's
    (the chart's nodeHealth.taints)."""

    def node_rules(self) -> NodeRules:
        return NodeRules.parse(self.unhealthy_node_conditions, self.unhealthy_node_taints)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Any:
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = ENV_NAMES[f.name]
            raw = env.get(name, "")
            if raw == "":
                continue
            kind = type(f.default)
            if kind is bool:
                if raw.strip().lower() not in BOOLEANS:
                    raise SystemExit(f"{name}={raw!r} is not a boolean: set it to true or false")
                values[f.name] = BOOLEANS[raw.strip().lower()]
                continue
            try:
                values[f.name] = kind(float(raw)) if kind in (int, float) else raw
            except ValueError:
                raise SystemExit(f"{name}={raw!r} is not a number: set it like {name}={f.default}") from None
        settings = cls(**values)
        if settings.api_qps <= 0 or settings.api_burst < 1:
            raise SystemExit("DISTTRAIN_API_QPS must be > 0 and DISTTRAIN_API_BURST >= 1")
        if settings.metrics_auth not in AUTH_MODES:
            raise SystemExit(f"DISTTRAIN_METRICS_AUTH={settings.metrics_auth!r} is not one of "
                             f"{', '.join(AUTH_MODES)}: set kubernetes (the default) or none")
        if settings.workers < 1 or settings.lease_seconds < 3:
            raise SystemExit("DISTTRAIN_WORKERS must be >= 1 and DISTTRAIN_LEASE_SECONDS >= 3")
        try:
            settings.node_rules()
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        return settings


def with_integrations(core: type) -> type:
    """The settings class: `core`'s fields, then every registered integration's, in the
    registry's order (integrations/protocol.py, Setting)."""
    declared = [(s.name, type(s.default), field(default=s.default, metadata={"doc": s.doc}))
                for kind in REGISTRY for s in kind.settings]
    settings = make_dataclass("Settings", declared, bases=(core,), frozen=True, slots=True)
    settings.__module__ = __name__
    return settings


Settings = with_integrations(CoreSettings)


BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def lease_settings(settings: Any, env: dict[str, str] | None = None,
                   service_account_namespace: str = SERVICE_ACCOUNT_NAMESPACE) -> LeaseSettings | None:
    """Where and how to elect a leader; None when leader election is off."""
    if not settings.leader_election:
        return None
    env = dict(os.environ if env is None else env)
    namespace = settings.lease_namespace or env.get("DISTTRAIN_OPERATOR_NAMESPACE", "")
    if not namespace:
        try:
            with open(service_account_namespace) as handle:
                namespace = handle.read().strip()
        except OSError:
            pass
    if not namespace:
        raise SystemExit("DISTTRAIN_LEADER_ELECTION is on but the Lease has no namespace: set "
                         "DISTTRAIN_LEASE_NAMESPACE (or run in a pod, whose namespace is used)")
    # client-go's proportions: renew within 2/3 of the lease, retry every 2/15 of it.
    return LeaseSettings(namespace=namespace, name=settings.lease_name, lease_seconds=settings.lease_seconds,
                         renew_deadline_seconds=settings.lease_seconds * 2 / 3,
                         retry_seconds=settings.lease_seconds * 2 / 15)


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


def configure_kopf(settings: kopf.OperatorSettings, ours: Any) -> None:
    # Deep objects stored under an older, looser CRD must decode, so validation can say
    # what is wrong with that one job (see __main__.RECURSION_LIMIT; also for `kopf run`).
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    # Jobs get no finalizer (no handler of ours needs one); kopf still removes this one from
    # jobs an older operator marked, when they are deleted.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # kopf's own retries of a broken watch follow the operator's one back-off schedule.
    settings.networking.error_backoffs = [exponential(1.0, 60.0, attempt) for attempt in range(1, 10)]
    # Except where the API server says when: a watch refused with 429 "storage is
    # (re)initializing" (its watch cache rebuilt after a CRD update, as `helm upgrade` does)
    # is tried again after its Retry-After (1 s), not after a back-off grown to a minute.
    settings.networking.enforce_retry_after = True
    # kopf logs "Handler ... succeeded" for every pod and job event at INFO: at 500 jobs that
    # is most of the log and a good share of the CPU. Our own lines say what was done.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # kopf logs every failed attempt of a request it retries as an ERROR; the handlers of
    # its logging (kopf.configure puts them on the root logger) say those as warnings.
    for handler in logging.getLogger().handlers:
        handler.addFilter(retried_as_warning)


def retried_as_warning(record: logging.LogRecord) -> bool:
    """A request kopf tries again (a 429 while the API server rebuilds its watch cache, a
    5xx) as a WARNING that says what happens next; one it gives up on stays an ERROR."""
    if record.levelno == logging.ERROR and "failed; will retry:" in str(record.msg):
        record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        record.msg = (f"{record.msg} (asked again after the server's Retry-After or the back-off; "
                      "nothing to do unless it keeps failing)")
    return True
