"""An install as shipped, and how the operator reads it: the chart and kustomize
renderings (real helm and kubectl), and the operator Deployment's arguments through its own
parser (`disttrain-operator`'s parse_args) and its settings from the container's env, so a
test holds an install to what the operator will do with it, not to what the test expects
the manifest to say. Values only: an env var set with valueFrom is the cluster's to fill."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
from unittest import mock

import yaml

from disttrain.operator.__main__ import parse_args
from disttrain.operator.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def chart_objects(cluster, release: str, namespace: str, *values: str) -> list[dict]:
    """`helm template` of charts/disttrain with these `--set`-style arguments."""
    out = subprocess.run([str(cluster.bin_dir / "helm"), "template", release, str(REPO / "charts" / "disttrain"),
                          "-n", namespace, *values], capture_output=True, text=True, env=cluster.env,
                         check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kustomize_text(cluster, path: str | Path) -> str:
    """`kubectl kustomize` of a folder of the checkout (relative to it, or absolute)."""
    return cluster.kubectl("kustomize", str(REPO / path)).stdout


def operator_deployment(objects: list[dict]) -> dict:
    found = [o for o in objects if o and o.get("kind") == "Deployment"]
    assert len(found) == 1, f"an install ships one operator Deployment, found {len(found)}"
    return found[0]


def operator_reading(deployment: dict) -> tuple[argparse.Namespace, Settings]:
    """(its parsed arguments, its settings): what the operator Pod would run with."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    with mock.patch.dict(os.environ, env, clear=True):  # parse_args reads its env defaults
        args = parse_args([str(a) for a in container.get("args", [])])
    return args, Settings.from_env(env)
