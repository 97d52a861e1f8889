"""`make planted-bugs` runs in the suite: each planted bug whose named tests are unit tests
(the issue-14 audit's, and those of hack/planted/*.json), planted again in a copy of this
checkout, must fail the tests named for it (hack/planted_bugs.py). A plant whose source
moved (STALE) fails here too, so the table cannot rot unseen. The bugs caught by trainer and
cluster tests cost minutes each and run with `make planted-bugs`; here every test any bug
names must at least exist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about 2 min; and mutation testing (which skips slow tests) must not nest it
def test_every_planted_bug_is_caught_by_its_named_tests():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    proc = subprocess.run([sys.executable, str(ROOT / "hack" / "planted_bugs.py"), "--under", "tests/unit"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    lines = [line for line in report.splitlines() if " CAUGHT " in f" {line} "]
    assert len(lines) >= 13 + 24, report
    assert "planted bugs caught" in report


def test_every_test_a_planted_bug_names_exists_and_each_set_bug_names_one():
    sets = sorted((ROOT / "hack" / "planted").glob("*.json"))
    bugs = [b for path in sets for b in json.loads(path.read_text())["bugs"]]
    assert len(bugs) >= 38 and all(b.get("tests") for b in bugs), [b["name"] for b in bugs if not b.get("tests")]
    missing = []
    for bug in bugs:
        for test in bug["tests"]:
            path, _, function = test.partition("::")
            source = ROOT / path
            if not source.is_file() or f"def {function}(" not in source.read_text():
                missing.append(f"{bug['name']}: {test}")
    assert missing == []
    layers = {t.split("/")[1] for b in bugs for t in b["tests"]}
    assert layers == {"unit", "trainer", "cluster"}, layers


@pytest.mark.slow  # a copy of the checkout and three short pytest runs
def test_the_sweep_tells_caught_from_missed_and_stale(tmp_path):
    """hack/planted_sweep.py, as docs/contributing.md runs it, on a set of three bugs and a
    layer of one test file: the bug that file checks is CAUGHT by a test of it, the bug it
    cannot see is MISSED, the plant whose text is gone is STALE; the checkout is untouched."""
    client = "operator/disttrain/client/logs.py"
    bugs = [{"name": "seen", "layer": "client", "file": client, "why": "w",
             "old": 'int((match[2] or "").ljust(9, "0"))', "new": 'int((match[2] or "").rjust(9, "0"))'},
            {"name": "unseen", "layer": "decisions", "file": "operator/disttrain/operator/core/ends.py", "why": "w",
             "old": "    if ttl is not None and done is not None:\n", "new": "    if ttl and done is not None:\n"},
            {"name": "gone", "layer": "client", "file": client, "why": "w", "old": "no such text", "new": "x"}]
    bug_set = tmp_path / "set.json"
    bug_set.write_text(json.dumps({"about": "a test", "bugs": bugs}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    before = (ROOT / client).read_text()
    proc = subprocess.run([sys.executable, str(ROOT / "hack" / "planted_sweep.py"), "--set", str(bug_set), "--jobs",
                           "2", "--json", str(tmp_path / "out.json"), "tests/unit/test_client.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = json.loads((tmp_path / "out.json").read_text())
    assert {name: v["verdict"] for name, v in verdicts.items()} == {"seen": "CAUGHT", "unseen": "MISSED",
                                                                     "gone": "STALE"}
    assert verdicts["seen"]["first"].startswith("tests/unit/test_client.py::")
    assert "1 of 3 caught" in proc.stdout and (ROOT / client).read_text() == before
