"""The package a user installs (docs/cli.md, "Install"): `make wheel`'s script builds it,
and the wheel alone (no checkout on the path) runs the documented first command."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _build_outputs() -> set[Path]:
    return {p for pattern in ("build", "*.egg-info", "operator/*.egg-info", "trainer/*.egg-info") for p in ROOT.glob(pattern)}


def test_the_wheel_holds_every_package_and_extra_and_validates_a_job_without_the_checkout(tmp_path: Path) -> None:
    before = _build_outputs()
    out = subprocess.run(["bash", str(ROOT / "hack" / "wheel.sh"), str(tmp_path / "dist")], capture_output=True,
                         text=True, env=os.environ | {"PYTHON": sys.executable}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = out.stdout.split()
    assert Path(wheel).name == "disttrain-0.1.0-py3-none-any.whl"
    assert _build_outputs() == before  # built from a copy: the checkout gets no build/ or egg-info
    license_text = (ROOT / "LICENSE").read_text() if (ROOT / "LICENSE").exists() else ""
    assert license_text.split()[:4] == ["Apache", "License", "Version", "2.0,"], license_text[:200]
    assert "END OF TERMS AND CONDITIONS" in license_text
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        meta = archive.read("disttrain-0.1.0.dist-info/METADATA").decode()
        scripts = archive.read("disttrain-0.1.0.dist-info/entry_points.txt").decode()
    for module in ("disttrain/cli/main.py", "disttrain/train/__init__.py", "disttrain/operator/__main__.py",
                   "disttrain_trainer/training.py", "disttrain_trainer/data/corpus.txt"):
        assert module in names, module
    extras = {line.split(": ")[1] for line in meta.splitlines() if line.startswith("Provides-Extra: ")}
    assert {"cli", "local", "sweep", "trainer", "tracking", "operator"} <= extras, extras
    for script in ("disttrain = disttrain.cli.main:main", "kubectl-disttrain = disttrain.cli.main:main"):
        assert script in scripts
    # The license pyproject.toml names, as its text in the repository and in the wheel (issue 70).
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta, meta[:2000]
    assert "disttrain-0.1.0.dist-info/licenses/LICENSE" in names

    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    job = ROOT / "manifests" / "examples" / "cpu-ddp-2x1.yaml"
    run = subprocess.run([sys.executable, "-c", "import sys; from disttrain.cli.main import main; sys.exit(main())",
                          "validate", str(job)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "valid" in run.stdout
    located = subprocess.run([sys.executable, "-c", "import disttrain; print(disttrain.__file__)"], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=60)
    assert located.stdout.startswith(str(site)), located.stdout  # the wheel's code ran, not the checkout's
