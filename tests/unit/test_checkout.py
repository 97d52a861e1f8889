"""The tests test the checkout they live in.

Each clone has its own virtualenv over the shared packages (hack/venv.sh), and
`pythonpath` in the pytest configuration puts the checkout first even for a pytest run
from another clone's virtualenv: a test never passes against the wrong tree.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("package", ["disttrain.operator", "disttrain.api", "disttrain_trainer"])
def test_packages_are_imported_from_this_checkout(package):
    module = importlib.import_module(package)
    where = Path(module.__file__).resolve()
    assert where.is_relative_to(REPO), (
        f"{package} was imported from {where}, not from the checkout {REPO}: run pytest from "
        "the repository root (pyproject.toml sets pythonpath) or through make")


def test_each_clone_gets_a_venv_that_runs_its_own_code(tmp_path):
    """hack/venv.sh in two clones: one shared install of the packages (same pins), but each
    clone's `disttrain` and python run that clone's code, whichever ran the script last; a
    removed clone's venv goes with the next run."""
    import os
    import shutil
    import subprocess

    clone = tmp_path / "clone"
    (clone / "hack").mkdir(parents=True)
    for name in ("constraints.txt", "pyproject.toml", "hack/venv.sh"):
        shutil.copy(REPO / name, clone / name)
    (clone / "operator" / "disttrain" / "cli").mkdir(parents=True)
    (clone / "trainer").mkdir()
    (clone / "operator" / "disttrain" / "__init__.py").write_text("")
    (clone / "operator" / "disttrain" / "cli" / "__init__.py").write_text("")
    (clone / "operator" / "disttrain" / "cli" / "main.py").write_text("def main():\n    print('the clone')\n")

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a user runs them

    def venv(root):
        return Path(subprocess.run(["bash", str(root / "hack" / "venv.sh")], capture_output=True, text=True,
                                   check=True).stdout.strip())
    theirs = venv(clone)
    try:
        ours = venv(REPO)  # ran last
        assert theirs != ours and theirs.parent == ours.parent
        said = subprocess.run([theirs / "bin" / "disttrain"], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert said.stdout == "the clone\n", said.stderr
        shown = subprocess.run([ours / "bin" / "disttrain", "--help"], capture_output=True, text=True, env=env,
                               cwd=tmp_path)
        assert shown.stdout.startswith("usage: disttrain"), shown.stderr
        where = subprocess.run([ours / "bin" / "python", "-c", "import disttrain, torch; print(disttrain.__file__)"],
                               capture_output=True, text=True, env=env, cwd=tmp_path)
        assert Path(where.stdout.strip()).is_relative_to(REPO), where.stderr
        shutil.rmtree(clone)
        venv(REPO)
        assert not theirs.exists()
    finally:
        shutil.rmtree(theirs, ignore_errors=True)
