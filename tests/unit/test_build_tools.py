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
                                     "pause", "kueue", "scheduler-plugins", "versitygw", "kind", "registry"])
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


def test_only_the_named_modules_are_linked_and_the_set_stays_incomplete(tmp_path):
    """`make cluster-up` builds etcd, Kubernetes and KWOK alone (`--only`), not the whole
    set `make tools` builds; modules already built are linked in without Go."""
    hack = copy_of_hack(tmp_path)
    env = {**os.environ, "DISTTRAIN_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}  # no Go on PATH

    def tools(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(hack / "build-tools.sh"), *args], capture_output=True, text=True, env=env,
                              timeout=60)

    key = dict(line.split() for line in tools("--keys").stdout.splitlines())  # (the keys hash the Go version)
    for module, binary in (("etcd", "etcd"), ("kwok", "kwok"), ("helm", "helm")):
        built = tmp_path / f"tool-{module}-{key[module]}"
        built.mkdir()
        (built / binary).write_text("#!/bin/sh\n")
        (built / ".complete").touch()

    bin_dir = Path(tools("--print-bin").stdout.strip())
    assert tools("--only", "etcd", "kwok").returncode == 0
    assert sorted(p.name for p in bin_dir.iterdir()) == ["etcd", "kwok"]  # helm is built, but not asked for
    assert tools("--check").returncode == 1  # the set is not complete: `make tools` still builds the rest
    unknown = tools("--only", "etcd", "kube")
    assert unknown.returncode == 2 and "no tool module 'kube'" in unknown.stderr
    # A module not built yet needs Go, and says so.
    missing = tools("--only", "kubernetes")
    assert missing.returncode == 1 and "go not found on PATH" in missing.stderr
