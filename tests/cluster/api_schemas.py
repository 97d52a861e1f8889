"""kubeconform, strict and offline, against the schemas the test API server serves.

`schemas_dir(cluster)` installs our CRDs (manifests/crd/), converts the server's OpenAPI v3
with hack/kubeconform_schemas.py (once per cluster) and returns the folder; `kubeconform`
validates YAML text or files against it and returns kubeconform's per-object results.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# The Prometheus Operator's kinds: the chart renders them (monitoring on) but their CRDs
# are not on the test API server, so kubeconform has no schema for them (promtool checks
# the rules' content: test_chart.py).
NO_SCHEMA_HERE = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
_DIRS: dict[str, str] = {}


def _converter():
    spec = importlib.util.spec_from_file_location("kubeconform_schemas", REPO / "hack" / "kubeconform_schemas.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def schemas_dir(cluster) -> str:
    if cluster.kubeconfig not in _DIRS:
        cluster.kubectl("apply", "--server-side", "-f", str(REPO / "manifests" / "crd"))
        cluster.wait_established("distributedtrainings.disttrain.dev")
        # ... and published in the OpenAPI, which follows a moment later
        cluster.wait_for(lambda: {"apis/disttrain.dev/v1alpha1"} <= set(json.loads(
            cluster.kubectl("get", "--raw", "/openapi/v3").stdout)["paths"]), timeout=60,
            what="our CRDs in /openapi/v3")
        converter = _converter()
        # Inside the cluster's own state (removed with it, even after a kill), else removed at exit.
        out = tempfile.mkdtemp(prefix="disttrain-schemas-", dir=cluster.state_dir)
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        converter.write(converter.json_schemas(converter.fetch_documents(str(cluster.bin_dir / "kubectl"), cluster.env)), out)
        _DIRS[cluster.kubeconfig] = out
    return _DIRS[cluster.kubeconfig]


def kubeconform(cluster, *paths: str, text: str | None = None) -> list[dict[str, Any]]:
    """kubeconform -strict over paths (or text on stdin); its result for every object."""
    location = schemas_dir(cluster) + "/{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json"
    proc = subprocess.run([str(cluster.bin_dir / "kubeconform"), "-strict", "-ignore-missing-schemas",
                           "-output", "json", "-verbose", "-schema-location", location, *(paths or ["-"])],
                          input=text, capture_output=True, text=True, timeout=120)
    try:
        return json.loads(proc.stdout)["resources"]
    except (ValueError, KeyError):
        raise AssertionError(f"kubeconform exited {proc.returncode}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def problems(results: list[dict[str, Any]]) -> list[str]:
    """Every object that is not valid, except the kinds no schema here covers."""
    bad = []
    for r in results:
        if r["status"] == "statusValid":
            continue
        if r["status"] == "statusSkipped" and r["kind"] in NO_SCHEMA_HERE:
            continue
        bad.append(f"{r['filename']}: {r['kind']} {r['name']}: {r['status']} {r.get('msg', '')}"[:2000])
    return bad
