"""The operator process as `disttrain-operator` starts it: kopf embedded through its public
API with the arguments the flags ask for, and no official `kubernetes` client in the
operator image (kopf would import it only to recognise its model classes: ~20 MiB)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from .helpers import package_paths

REPO = Path(__file__).resolve().parents[2]

# Runs the entry point with kopf.operator replaced by a recorder, in a process where the
# official client cannot be imported, as in the operator image (its extra lacks it).
PROBE = """
import asyncio, json, sys
class NoOfficialClient:
    def find_spec(self, name, path=None, target=None):
        if name == "kubernetes" or name.startswith("kubernetes."):
            raise ImportError("not in the operator image")
sys.meta_path.insert(0, NoOfficialClient())
import kopf
seen = {}
async def operator(**kwargs):
    seen.update({k: v for k, v in kwargs.items() if isinstance(v, (str, bool, list, tuple, type(None)))})
    seen["flags"] = [k for k in ("stop_flag", "ready_flag") if kwargs.get(k) is not None]
kopf.operator = operator
from disttrain.operator.__main__ import main
code = main(sys.argv[1:])
seen["namespaces"] = list(seen.get("namespaces") or [])
print(json.dumps({"code": code, "seen": seen, "kubernetes": "kubernetes" in sys.modules}))
"""


def start(*flags: str) -> dict:
    env = {**os.environ, "PYTHONPATH": package_paths()}
    env.pop("DISTTRAIN_WATCH_NAMESPACES", None)
    out = subprocess.run([sys.executable, "-c", PROBE, *flags], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_kopf_is_embedded_with_stop_and_ready_flags_and_without_the_official_client():
    run = start("-n", "team-a", "-n", "team-b", "--liveness", "")
    assert run["code"] == 0 and run["kubernetes"] is False
    seen = run["seen"]
    assert seen["standalone"] is True and seen["clusterwide"] is False
    assert seen["namespaces"] == ["team-a", "team-b"]
    assert seen["liveness_endpoint"] is None
    assert seen["flags"] == ["stop_flag", "ready_flag"]


def test_all_namespaces_and_the_default_liveness_endpoint():
    seen = start("--all-namespaces")["seen"]
    assert seen["clusterwide"] is True and seen["namespaces"] == []
    assert seen["liveness_endpoint"] == "http://0.0.0.0:8081/healthz"


def test_the_operator_image_does_not_install_the_official_client():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = [re.split(r"[<>=\[ ]", req)[0] for req in extras["operator"]]
    assert "kubernetes" not in names and "kopf" in names
    assert [re.split(r"[<>=\[ ]", req)[0] for req in extras["cli"]] == ["kubernetes"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "-r requirements-operator.txt" in dockerfile  # the image installs exactly that extra


def test_the_shell_bends_no_private_part_of_kopf():
    """kopf through its public API only: no private registries, no sys.modules games."""
    package = REPO / "operator" / "disttrain.operator"
    shell = [p for p in package.rglob("*.py") if "sweep" not in p.parts]  # sweeps reach into Optuna, not kopf
    offences = []
    for path in shell:
        text = path.read_text()
        for needle in ("_spawning", "SLF001", "sys.modules[", "sys.modules.setdefault", "kopf._", "kopf.cli"):
            if needle in text:
                offences.append(f"{path.relative_to(REPO)}: {needle}")
    assert offences == []
