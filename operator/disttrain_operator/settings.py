"""Operator settings: one documented dataclass, read once from the environment at start-up
(the Deployment and the chart set these variables), and kopf's own settings beside it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields
from typing import Any

import kopf

from .api.names import FINALIZER, JOB_LABEL
from .api.types import GROUP


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
    log_format: str = "plain"
    """DISTTRAIN_LOG_FORMAT: plain | json (one JSON object per line, for log pipelines)."""

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
        if settings.log_format not in ("plain", "json"):
            raise SystemExit(f"DISTTRAIN_LOG_FORMAT={settings.log_format!r}: use plain or json")
        if settings.api_qps <= 0 or settings.api_burst < 1:
            raise SystemExit("DISTTRAIN_API_QPS must be > 0 and DISTTRAIN_API_BURST >= 1")
        return settings


ENV_NAMES = {"metrics_port": "DISTTRAIN_OPERATOR_METRICS_PORT",
             **{f.name: f"DISTTRAIN_{f.name.upper()}" for f in fields(Settings) if f.name != "metrics_port"}}


def configure_kopf(settings: kopf.OperatorSettings, ours: Settings) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # Only our worker pods are watched, filtered by the API server (not every pod).
    settings.watching.label_selectors["v1", "pods"] = JOB_LABEL
    settings.networking.error_backoffs = [1, 2, 3, 5, 8, 13, 21, 34, 55]
    if ours.log_format == "json":
        use_json_logs()


def use_json_logs() -> None:
    """One JSON object per log line (python-json-logger, a kopf dependency)."""
    from pythonjsonlogger.json import JsonFormatter

    formatter = JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s",
                              rename_fields={"levelname": "level", "asctime": "time"})
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
