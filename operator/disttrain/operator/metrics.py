"""The operator's Prometheus metrics (names documented in docs/operations.md, "Metrics"), on their own
registry; metrics_serving.py serves them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from disttrain.operator.core.failures import CAUSES

PHASES = ("Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed")


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("disttrain_operator_jobs", "Jobs this operator knows, by phase.", ["phase"], registry=r)
        self.reconcile_seconds = Histogram(
            "disttrain_operator_reconcile_seconds", "Time of one reconcile pass.", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.pods_created = Counter("disttrain_operator_pods_created", "Worker pods created.", registry=r)
        self.job_restarts = Counter("disttrain_operator_job_restarts",
                                    "Restart rounds (failed workers recreated).", registry=r)
        self.time_to_running = Histogram(
            "disttrain_operator_job_time_to_running_seconds",
            "Creation to phase Running.", registry=r,
            buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800))
        self.validation_warnings = Counter("disttrain_operator_validation_warnings",
                                           "Guardrail warnings, by reason.", ["reason"], registry=r)
        self.job_failures = Counter("disttrain_operator_job_failures", "Failed jobs, by reason.", ["reason"],
                                    registry=r)
        self.checkpoint_age = Gauge("disttrain_operator_checkpoint_age_seconds",
                                    "Age of each running job's newest checkpoint.",
                                    ["namespace", "job"], registry=r)
        self.worker_failures = Counter(
            "disttrain_job_failures", "Worker failures of each job by cause, one per entry of status.failures.",
            ["namespace", "job", "cause"], registry=r)
        self.goodput_ratio = Gauge(
            "disttrain_job_goodput_ratio",
            "The share of each job's worker-seconds that went to steps that count, as status.goodput.ratio.",
            ["namespace", "job"], registry=r)
        self.straggler_ratio = Gauge(
            "disttrain_job_straggler_ratio",
            "The slowest worker's compute time per step over the other workers' median, in the trainer's newest "
            "report window: 1 is an even job; failurePolicy.stragglerRatio flags it.",
            ["namespace", "job"], registry=r)
        self.lost_seconds = Counter(
            "disttrain_job_lost_seconds", "Worker-seconds of steps done again after failures, by the failure's cause.",
            ["namespace", "job", "cause"], registry=r)
        self.reconcile_errors = Counter(
            "disttrain_operator_reconcile_errors",
            "Reconcile passes that failed and were retried with back-off, by reason.",
            ["reason"], registry=r)
        self.api_requests = Counter(
            "disttrain_operator_api_requests",
            "Requests to the Kubernetes API by verb (the HTTP method; WATCH for each watch request of the pod "
            "watch) and answer (code 0: no answer).",
            ["verb", "code"], registry=r)
        self._phases: dict[tuple[str, str], str] = {}
        for phase in PHASES:
            self.jobs.labels(phase=phase).set(0)

    def observe_phase(self, key: tuple[str, str], phase: str | None) -> None:
        """Keep disttrain_operator_jobs{phase} equal to the jobs we currently know: O(1)
        per call (only the old and the new phase move). Called from the event loop only."""
        before = self._phases.pop(key, None) if phase is None else self._phases.get(key)
        if before == phase:
            return
        if phase is not None:
            self._phases[key] = phase
        if before in PHASES:
            self.jobs.labels(phase=before).dec()
        if phase in PHASES:
            self.jobs.labels(phase=phase).inc()

    def forget(self, namespace: str, name: str) -> None:
        self.observe_phase((namespace, name), None)
        self.forget_checkpoint(namespace, name)
        for series, labels in ((self.goodput_ratio, ((namespace, name),)),
                               (self.straggler_ratio, ((namespace, name),)),
                               (self.worker_failures, [(namespace, name, cause) for cause in CAUSES]),
                               (self.lost_seconds, [(namespace, name, cause) for cause in CAUSES])):
            for values in labels:  # a deleted job's series go with it
                try:
                    series.remove(*values)
                except KeyError:
                    pass

    def forget_checkpoint(self, namespace: str, name: str) -> None:
        try:
            self.checkpoint_age.remove(namespace, name)
        except KeyError:
            pass
