"""Every shipped example is a valid Kubernetes object and a valid DistributedTraining."""

from __future__ import annotations

import os

import pytest
import yaml

from disttrain.api import validate_document

from .conftest import EXAMPLES, ROOT

REQUIRED = {"cpu-ddp-2x1", "gpu-1", "gpu-2", "gpu-4-single-node", "gpt-ddp-2x8", "fsdp-4x8-pvc",
            "elastic-2-4", "mesh-fsdp-tp", "custom-command"}


def test_the_promised_examples_exist():
    names = {os.path.basename(p)[:-5] for p in EXAMPLES}
    assert REQUIRED <= names, REQUIRED - names


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_example_is_valid(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), path
        assert doc["metadata"].get("name")
    jobs = [d for d in docs if d["kind"] == "DistributedTraining"]
    assert len(jobs) == 1
    result = validate_document(jobs[0])
    assert result.ok, [str(e) for e in result.errors]


def test_example_topologies():
    def resolved(name):
        path = os.path.join(ROOT, "manifests", "examples", f"{name}.yaml")
        doc = next(d for d in yaml.safe_load_all(open(path)) if d["kind"] == "DistributedTraining")
        return validate_document(doc).resolved

    assert resolved("cpu-ddp-2x1").world_size == 2 and resolved("cpu-ddp-2x1").strategy == "ddp"
    assert resolved("gpt-ddp-2x8").world_size == 16
    assert resolved("fsdp-4x8-pvc").world_size == 32
    assert (resolved("elastic-2-4").min_nodes, resolved("elastic-2-4").max_nodes) == (2, 4)
    assert resolved("mesh-fsdp-tp").strategy == "fsdp"
    assert resolved("gpu-1").strategy == "auto"


def test_crd_file_is_a_kubernetes_object():
    path = os.path.join(ROOT, "manifests", "crd", "disttrain.dev_distributedtrainings.yaml")
    crd = yaml.safe_load(open(path))
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "distributedtrainings.disttrain.dev"


def test_cpu_example_and_operator_fit_a_two_cpu_node():
    """`kubectl apply -f cpu-ddp-2x1.yaml` on a 2-core node beside the operator must schedule.

    Both install paths ship the operator's requests: the chart's values and the kustomize
    Deployment. Two 1-CPU workers plus the operator once left a worker Pending with
    "Insufficient cpu".
    """
    from disttrain.api.quantity import parse_quantity

    job = yaml.safe_load(open(os.path.join(ROOT, "manifests", "examples", "cpu-ddp-2x1.yaml")))
    workers = job["spec"]["nodes"] * parse_quantity(job["spec"]["resources"]["requests"]["cpu"])
    chart = yaml.safe_load(open(os.path.join(ROOT, "charts", "disttrain", "values.yaml")))
    deployment = yaml.safe_load(open(os.path.join(ROOT, "manifests", "operator", "deployment.yaml")))
    kustomize = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    for operator in (chart["resources"], kustomize):
        assert workers + parse_quantity(operator["requests"]["cpu"]) <= 2


def test_the_readme_job_is_the_example_it_applies():
    """README.md shows a job, then applies manifests/examples/gpt-ddp-2x4.yaml: what it shows
    is in that file (its checkpoint claim included, which the file ships)."""
    import re

    readme = open(os.path.join(ROOT, "README.md")).read()
    shown = yaml.safe_load(re.search(r"```yaml\n(.*?)```", readme, re.S).group(1))
    assert "kubectl apply -f manifests/examples/gpt-ddp-2x4.yaml" in readme
    with open(os.path.join(ROOT, "manifests", "examples", "gpt-ddp-2x4.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    job = next(d for d in docs if d["kind"] == "DistributedTraining")
    assert shown["metadata"]["name"] == job["metadata"]["name"]
    assert {k: job["spec"][k] for k in shown["spec"]} == shown["spec"]
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    assert shown["spec"]["checkpoint"]["claimName"] in claims


def test_the_shipped_scripts_are_the_ones_docs_training_api_shows():
    """manifests/examples/scripts/ holds what docs/training-api.md shows (the examples'
    ConfigMaps are made from these files): train_loop.py as shown, train_hf.py as shown
    less its two disttrain lines (what instrument: auto runs unchanged)."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location("doc_blocks", os.path.join(ROOT, "tests", "doc_blocks.py"))
    blocks = sys.modules.setdefault("doc_blocks", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(blocks)
    text = open(os.path.join(ROOT, "docs", "training-api.md")).read()
    shown = {b.file: b.text for b in blocks.parse_blocks("docs/training-api.md", text) if b.file}
    scripts = os.path.join(ROOT, "manifests", "examples", "scripts")
    assert open(os.path.join(scripts, "train_loop.py")).read() == shown["train_loop.py"]
    plain = shown["train_hf.py"].replace("from disttrain.train.hf import DisttrainCallback\n", "")
    plain = plain.replace(", callbacks=[DisttrainCallback()]", "")
    assert plain != shown["train_hf.py"] and "from disttrain" not in plain and "DisttrainCallback" not in plain
    assert open(os.path.join(scripts, "train_hf.py")).read() == plain
    assert sorted(os.listdir(scripts)) == ["train_hf.py", "train_loop.py"]
