"""Issue 70 item 7: every YAML the CLI prints is plain objects, as kubectl prints them:
no anchors and aliases (`&id001` / `*id001`) where one object appears twice."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from .conftest import EXAMPLES, ROOT
from .helpers import disttrain


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.endswith(("/cpu-ddp-2x1.yaml",
                                                                          "/zero-code-transformers.yaml"))])
def test_render_prints_no_anchors_or_aliases(example):
    result = disttrain("render", str(example))
    assert result.returncode == 0, result.stderr
    assert "&id0" not in result.stdout and "*id0" not in result.stdout, result.stdout
    assert all(list(yaml.safe_load_all(result.stdout)))


def test_dump_writes_an_object_seen_twice_out_in_full_both_times():
    from disttrain.cli.output import dump

    shared = {"name": "x", "value": "1"}
    out = io.StringIO()
    dump({"a": [shared], "b": [shared]}, "yaml", out)
    assert out.getvalue() == "a:\n- name: x\n  value: '1'\nb:\n- name: x\n  value: '1'\n"


def test_every_line_that_says_what_render_prints_names_each_kind_it_prints():
    """The PodDisruptionBudget a job owns is printed by render; the lines of the docs and
    of --help that list what render prints (what "the operator would create") name it too."""
    example = next(e for e in EXAMPLES if e.endswith("/cpu-ddp-2x1.yaml"))
    kinds = {d["kind"] for d in yaml.safe_load_all(disttrain("render", example).stdout)}
    assert kinds == {"Service", "NetworkPolicy", "PodDisruptionBudget", "Pod"}
    root = Path(ROOT)
    files = [*sorted(root.glob("docs/*.md")), root / "README.md", root / "operator/disttrain/cli/render.py"]
    lines = [(str(path), line) for path in files for line in path.read_text().splitlines()
             if "the operator would create" in line and "Service" in line]  # not "the children ..."
    assert len(lines) >= 5, lines
    for path, line in lines:
        assert all(kind in line for kind in ("Service", "NetworkPolicy", "PodDisruptionBudget", "Pod")), (path, line)
