"""The CRD on a real API server: examples are stored, bad specs are rejected with our
messages, `kubectl explain` teaches the API and `kubectl get dt` shows our columns."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

pytestmark = pytest.mark.cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CRD = os.path.join(REPO, "manifests", "crd", "disttrain.dev_distributedtrainings.yaml")
EXAMPLES = sorted(glob.glob(os.path.join(REPO, "manifests", "examples", "*.yaml")))


@pytest.fixture(scope="module")
def crd(cluster):
    cluster.kubectl("apply", "-f", CRD)
    cluster.wait_established()
    return cluster


def doc(name="cel", **spec):
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
            "metadata": {"name": name}, "spec": spec}


def test_every_example_is_stored(crd, namespace):
    for path in EXAMPLES:
        crd.kubectl("apply", "-n", namespace, "-f", path)
    stored = yaml.safe_load(crd.kubectl("get", "dt", "-n", namespace, "-o", "yaml").stdout)["items"]
    expected = {d["metadata"]["name"] for p in EXAMPLES for d in yaml.safe_load_all(open(p))
                if d and d["kind"] == "DistributedTraining"}
    assert {d["metadata"]["name"] for d in stored} == expected
    cpu = next(d for d in stored if d["metadata"]["name"] == "cpu-ddp")
    # The API server fills in no default but the size (the scale subresource reads it): the
    # stored spec is what was written, the operator applies the rest (a training template's
    # defaults first).
    written = yaml.safe_load(open(next(p for p in EXAMPLES if p.endswith("cpu-ddp-2x1.yaml"))))["spec"]
    assert cpu["spec"] == written
    bare = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "metadata": {"name": "bare"},
            "spec": {"trainer": {"builtin": {}}}}
    crd.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(bare))
    assert yaml.safe_load(crd.kubectl("get", "dt", "bare", "-n", namespace, "-o", "yaml").stdout)["spec"] == {
        "trainer": {"builtin": {}}, "nodes": 1}


@pytest.mark.parametrize("spec,message", [
    ({"nodes": 2, "minNodes": 3, "maxNodes": 4}, "minNodes must be <= nodes: lower spec.minNodes or raise spec.nodes"),
    ({"nodes": 5, "maxNodes": 4}, "nodes must be <= maxNodes: raise spec.maxNodes or lower spec.nodes"),
    ({"trainer": {"builtin": {}, "command": ["t.py"]}}, "set exactly one of trainer.builtin"),
    ({"trainer": {"builtin": {}, "args": ["x"]}}, "trainer.args is only used with trainer.command"),
    ({"nodes": 2, "minNodes": 1, "mesh": {"fsdp": 2, "tp": 1}}, "mesh needs a fixed world size"),
    ({"nprocPerNode": "many"}, "nprocPerNode must be an integer from 1 to 128 or the string auto"),
    ({"nprocPerNode": 0}, "nprocPerNode must be an integer from 1 to 128 or the string auto"),
    ({"nprocPerNode": 100000000000}, "nprocPerNode must be an integer from 1 to 128 or the string auto"),
    ({"nodes": 2}, "checkpoint.uri or checkpoint.claimName is required when the built-in trainer can have more "
                   "than one pod"),
    ({"nodes": 1, "maxNodes": 2, "checkpoint": {"path": "/c"}}, "checkpoint.uri or checkpoint.claimName is required"),
    ({"checkpoint": {"uri": "s3://team-ckpt/run", "claimName": "c"}},
     "set one of checkpoint.uri (object storage) or checkpoint.claimName (a volume), not both"),
    ({"checkpoint": {"secretRef": {"name": "s3"}}}, "checkpoint.secretRef and checkpoint.endpoint only apply to an "
                                                     "object store"),
    ({"checkpoint": {"storage": "none", "claimName": "c"}}, "checkpoint.storage none keeps no checkpoints"),
    ({"checkpoint": {"uri": "gs://team-ckpt/run"}}, "spec.checkpoint.uri in body should match"),
    ({"strategy": "ddpp"}, 'spec.strategy: Unsupported value: "ddpp"'),
    ({"gpusPerNode": -1}, "spec.gpusPerNode: Invalid value: -1: spec.gpusPerNode in body should be greater than or equal to 0"),
    ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "Duplicate value"),
])
def test_schema_and_cel_reject_bad_specs_with_our_messages(crd, namespace, spec, message):
    result = crd.apply(doc(**spec), namespace=namespace, check=False)
    assert result.returncode != 0, "the API server accepted an invalid spec"
    assert message in result.stderr, result.stderr


def test_long_or_bad_names_are_rejected(crd, namespace):
    result = crd.apply(doc(name="a" * 52), namespace=namespace, check=False)
    assert "must be at most 51 characters" in result.stderr
    result = crd.apply(doc(name="1abc"), namespace=namespace, check=False)
    assert "must start with a lowercase letter" in result.stderr


def test_kubectl_explain_prints_our_field_docs(crd):
    out = crd.kubectl("explain", "dt.spec").stdout
    assert "gpusPerNode" in out and "GPUs requested by each worker pod" in out
    out = crd.kubectl("explain", "dt.spec.mesh").stdout
    assert "mesh: 2-D FSDP x tensor parallel" in out and "size of the tensor-parallel dimension" in out
    out = crd.kubectl("explain", "dt.spec.rendezvous.joinTimeoutSeconds").stdout
    assert "how long agents wait for minNodes to join" in out


def test_kubectl_explain_teaches_the_kubernetes_fields_too(crd):
    out = crd.kubectl("explain", "dt.spec.scheduling.affinity.nodeAffinity").stdout
    assert "Describes node affinity scheduling rules for the pod." in out
    assert "requiredDuringSchedulingIgnoredDuringExecution" in out
    out = crd.kubectl("explain", "dt.spec.scheduling.tolerations.effect").stdout
    assert "Effect indicates the taint effect to match." in out
    out = crd.kubectl("explain", "dt.spec.podTemplate.spec").stdout
    assert "volumes" in out and "initContainers" in out and "ephemeralContainers" not in out


def test_kubectl_get_shows_printer_columns_and_short_names(crd, namespace):
    crd.apply(doc(name="cols", nodes=1), namespace=namespace)
    header = crd.kubectl("get", "dtrain", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "NODES", "WORLD", "STEP", "PROGRESS", "SAMPLES/S", "CHECKPOINT", "RESTARTS",
                      "AGE"]
    wide = crd.kubectl("get", "dt", "-n", namespace, "-o", "wide").stdout.splitlines()[0].split()
    assert wide[len(header):] == ["STRATEGY", "LOSS"]


def test_status_and_scale_subresources(crd, namespace):
    crd.apply(doc(name="scaled", nodes=1, maxNodes=3, checkpoint={"claimName": "c"}), namespace=namespace)
    crd.kubectl("scale", "dt/scaled", "-n", namespace, "--replicas=3")
    assert crd.get("dt", "scaled", namespace)["spec"]["nodes"] == 3
    # A spec write cannot touch status (the status subresource is separate).
    crd.kubectl("patch", "dt/scaled", "-n", namespace, "--type=merge", "-p", '{"status":{"phase":"Running"}}')
    assert "status" not in crd.get("dt", "scaled", namespace) or \
        crd.get("dt", "scaled", namespace)["status"].get("phase") != "Running"
