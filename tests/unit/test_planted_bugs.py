"""`make planted-bugs` runs in the suite: each bug the issue-14 audit planted, planted
again in a copy of this checkout, must fail the tests named for it (hack/planted_bugs.py).
A plant whose source moved (STALE) fails here too, so the table cannot rot unseen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about 25 s; and mutation testing (which skips slow tests) must not nest it
def test_every_planted_bug_is_caught_by_its_named_tests():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    proc = subprocess.run([sys.executable, str(ROOT / "hack" / "planted_bugs.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    lines = [line for line in report.splitlines() if " CAUGHT " in f" {line} "]
    assert len(lines) >= 13, report
    assert "planted bugs caught" in report
