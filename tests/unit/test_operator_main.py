"""The operator process as `disttrain-operator` starts it: kopf gets the arguments the
flags ask for, and the official `kubernetes` client (installed for the CLI) stays out of
the operator's memory (kopf would import it only to recognise its model classes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys, types
fake = types.ModuleType("kopf.cli")
def main(args, standalone_mode):
    import kopf  # the real kopf, as kopf.cli would have it
    print(json.dumps({"args": args, "kubernetes": sys.modules.get("kubernetes") is not None}))
    return 0
fake.main = main
sys.modules["kopf.cli"] = fake
from disttrain_operator.__main__ import main as operator_main
sys.exit(operator_main(sys.argv[1:]))
"""


def start(*flags: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO / "trainer")])}
    env.pop("DISTTRAIN_WATCH_NAMESPACES", None)
    out = subprocess.run([sys.executable, "-c", PROBE, *flags], capture_output=True, text=True, env=env,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_operator_process_does_not_load_the_official_client():
    seen = start("-n", "team-a")
    assert seen["kubernetes"] is False
    assert seen["args"][:3] == ["run", "-m", "disttrain_operator.handlers"]
    assert "--namespace=team-a" in seen["args"] and "--standalone" in seen["args"]
