"""How the tests' real Prometheus scrapes the operator: with the settings the chart's
ServiceMonitor gives it (scheme, TLS, a bearer token), turned into scrape config the way
Prometheus Operator turns an endpoint into one. The test's token stands where the
ServiceMonitor names Prometheus's own token file."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def scrape_config(job_name: str, endpoint: dict[str, Any], token_file: Path, **targets: Any) -> dict[str, Any]:
    """One scrape_configs entry for a ServiceMonitor endpoint (`targets`: static_configs or
    file_sd_configs)."""
    config: dict[str, Any] = {"job_name": job_name, "honor_labels": bool(endpoint.get("honorLabels")),
                              "scheme": endpoint.get("scheme", "http"), **targets}
    if endpoint.get("bearerTokenFile"):
        config["authorization"] = {"credentials_file": str(token_file)}
    if (endpoint.get("tlsConfig") or {}).get("insecureSkipVerify"):
        config["tls_config"] = {"insecure_skip_verify": True}
    return config
