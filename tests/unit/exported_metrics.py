"""The metric names the operator and the trainer export, read from their real registries:
what the chart's dashboards and alert rules, and the docs, may name (test_chart_sources.py
and tests/cluster/test_chart.py)."""

from __future__ import annotations

import re

# The documented metric names (docs/operations.md): the contract. The code must export (at least) these.
DESIGN_METRICS = {
    "disttrain_operator_jobs", "disttrain_operator_reconcile_seconds", "disttrain_operator_pods_created_total",
    "disttrain_operator_job_restarts_total", "disttrain_operator_job_time_to_running_seconds",
    "disttrain_operator_validation_warnings_total", "disttrain_operator_job_failures_total",
    "disttrain_operator_checkpoint_age_seconds", "disttrain_train_step", "disttrain_train_loss",
    "disttrain_train_samples_per_second", "disttrain_train_step_seconds", "disttrain_train_world_size",
    "disttrain_train_restarts", "disttrain_checkpoint_save_seconds", "disttrain_checkpoint_last_step",
    "disttrain_checkpoint_last_timestamp_seconds", "disttrain_job_failures_total",
    "disttrain_job_goodput_ratio", "disttrain_job_lost_seconds_total",
}
# Series each metric type exposes (prometheus_client names a counter's family without _total).
_SERIES = {"counter": ("_total",), "gauge": ("",), "histogram": ("", "_bucket", "_count", "_sum"),
           "summary": ("", "_count", "_sum")}


def exported_families() -> dict[str, str]:
    """{metric name as documented: type} of the operator's and the trainer's real registries."""
    from prometheus_client import CollectorRegistry

    from disttrain.operator.metrics import OperatorMetrics
    from disttrain_trainer.config import MetricsConfig
    from disttrain_trainer.metrics import PrometheusSink

    trainer = CollectorRegistry()
    PrometheusSink(MetricsConfig(job="j", namespace="n", pod="p"), restarts=0, registry=trainer)
    out = {}
    for registry in (OperatorMetrics().registry, trainer):
        for family in registry.collect():
            name = family.name + ("_total" if family.type == "counter" else "")
            out[name] = family.type
    return out


def exported_series() -> set[str]:
    """Every series name a query, dashboard or doc may use (histogram names included)."""
    out = set()
    for name, kind in exported_families().items():
        base = name.removesuffix("_total") if kind == "counter" else name
        out.update(base + suffix for suffix in _SERIES[kind])
    return out


METRICS = exported_series()


def metric_names(text: str) -> set[str]:
    return set(re.findall(r"\b(disttrain_(?:operator|train|checkpoint|job)_[a-z_]+)", text))
