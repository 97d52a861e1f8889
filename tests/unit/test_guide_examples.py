"""Every yaml block of docs/distributed-training.md: the jobs pass the real validator with
no error and no warning (they are meant to be copied), and `disttrain validate` agrees."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from disttrain.api.validate import validate_document

from .helpers import package_paths

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "distributed-training.md"
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)


def yaml_blocks(text: str) -> list[str]:
    return _YAML_BLOCK.findall(text)


def documents() -> list[dict]:
    return [d for block in yaml_blocks(GUIDE.read_text()) for d in yaml.safe_load_all(block) if d]


def jobs() -> list[dict]:
    return [d for d in documents() if d.get("kind") == "DistributedTraining"]


def test_the_guide_has_every_promised_shape():
    resolved, meshes = {}, []
    for doc in jobs():
        result = validate_document(doc)
        assert result.ok, (doc["metadata"]["name"], [str(e) for e in result.errors])
        resolved[doc["metadata"]["name"]] = result.resolved
        if result.job.spec.mesh and result.job.spec.mesh.tp > 1 and result.resolved.strategy == "fsdp":
            meshes.append(result.resolved.world_size)
    shapes = {(r.nodes, r.nproc_per_node, r.strategy) for r in resolved.values()}
    for gpus in (1, 2, 4, 8):
        assert any(nodes == 1 and nproc == gpus for nodes, nproc, _ in shapes), f"no {gpus}-GPU job"
    assert any(nodes == 2 and nproc == 8 for nodes, nproc, _ in shapes), "no 2x8 job"
    assert any(r.max_nodes > r.min_nodes for r in resolved.values()), "no elastic job"
    assert meshes, "no FSDP x TP job"
    # Everything else in the guide is the checkpoint claim the jobs name.
    others = [d for d in documents() if d.get("kind") != "DistributedTraining"]
    assert [d["kind"] for d in others] == ["PersistentVolumeClaim"]
    assert {j["spec"]["checkpoint"]["claimName"] for j in jobs()} == {others[0]["metadata"]["name"]}


@pytest.mark.parametrize("doc", jobs(), ids=lambda d: d["metadata"]["name"])
def test_each_job_validates_without_warnings(doc):
    result = validate_document(doc)
    assert result.ok, [str(e) for e in result.errors]
    assert not result.warnings, [str(w) for w in result.warnings]


def test_global_batch_comments_match_the_spec():
    """`# global batch A x B = N` comments: N is what the spec gives (world x batch x accumulation)."""
    for block in yaml_blocks(GUIDE.read_text()):
        match = re.search(r"global batch ([\d x]+) = (\d+)", block)
        if not match:
            continue
        doc = next(d for d in yaml.safe_load_all(block) if d)
        result = validate_document(doc)
        spec = doc["spec"]
        dp = spec["mesh"]["fsdp"] if "mesh" in spec else result.resolved.world_size
        expected = dp * spec["trainer"]["builtin"]["batchSize"] * spec.get("accumulateGradBatches", 1)
        factors = [int(f) for f in match.group(1).split(" x ")]
        assert int(match.group(2)) == expected == _product(factors), (doc["metadata"]["name"], match.group(0))


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def test_disttrain_validate_accepts_every_job(tmp_path):
    path = tmp_path / "guide-jobs.yaml"
    path.write_text(yaml.safe_dump_all(jobs(), sort_keys=False))
    proc = subprocess.run([sys.executable, "-m", "disttrain.cli", "validate", str(path)],
                          capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": package_paths(), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": valid") == len(jobs()) and "warning" not in proc.stdout + proc.stderr
