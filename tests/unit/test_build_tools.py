"""hack/build-tools.sh caches each tool's module on a key of its own: adding or bumping
one tool rebuilds that tool only (and the tools that take a version from it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .helpers import ROOT


def keys(hack: Path, cache: Path) -> dict[str, str]:
    out = subprocess.run(["bash", str(hack / "build-tools.sh"), "--keys"], capture_output=True, text=True,
                         check=True, env={**os.environ, "DISTTRAIN_CACHE": str(cache)}, timeout=60)
    return dict(line.split() for line in out.stdout.splitlines())


def copy_of_hack(tmp_path: Path) -> Path:
    hack = tmp_path / "hack"
    hack.mkdir()
    shutil.copy(ROOT / "hack" / "build-tools.sh", hack)
    shutil.copytree(ROOT / "hack" / "tools", hack / "tools")
    return hack


def test_bumping_one_tool_changes_its_key_only(tmp_path):
    hack = copy_of_hack(tmp_path)
    before = keys(hack, tmp_path)
    assert sorted(before) == sorted(["etcd", "kubernetes", "kwok", "kubeconform", "helm", "containerd", "coredns",
                                     "pause", "kueue", "scheduler-plugins", "versitygw", "kind"])
    assert keys(hack, tmp_path) == before  # a second look builds nothing new
    with open(hack / "tools" / "helm" / "go.mod", "a") as mod:
        mod.write("\n// bumped\n")
    after = keys(hack, tmp_path)
    assert {m for m in before if before[m] != after[m]} == {"helm"}


def test_a_tool_that_takes_a_version_from_another_follows_it(tmp_path):
    """kwok is stamped with the Kubernetes version it is built beside."""
    hack = copy_of_hack(tmp_path)
    before = keys(hack, tmp_path)
    with open(hack / "tools" / "kubernetes" / "go.mod", "a") as mod:
        mod.write("\n// bumped\n")
    after = keys(hack, tmp_path)
    assert {m for m in before if before[m] != after[m]} == {"kubernetes", "kwok"}


def test_the_shared_build_steps_rebuild_every_tool(tmp_path):
    hack = copy_of_hack(tmp_path)
    before = keys(hack, tmp_path)
    script = hack / "build-tools.sh"
    script.write_text(script.read_text().replace('export CGO_ENABLED=0', 'export CGO_ENABLED=0  # changed'))
    after = keys(hack, tmp_path)
    assert all(before[m] != after[m] for m in before)
    # A change outside the shared part (a comment in the header) changes no key.
    script.write_text("# a note\n" + script.read_text())
    assert keys(hack, tmp_path) == after
