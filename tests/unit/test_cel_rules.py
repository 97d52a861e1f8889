"""The CRD's CEL rules and the Python validator answer the same table of cases.

The API server runs the CEL rules at `kubectl apply`; `disttrain validate` and the
operator run api/validate.py. Both are evaluated here on one table (and on every node
range hypothesis draws), so a rule and its offline copy cannot drift apart. The cluster
test (tests/cluster/test_crd.py) keeps proving the API server agrees with cel-python.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.api import validate_document
from disttrain.api import types as t
from disttrain.api.meta import fields_of, json_name, meta_of

from .conftest import examples
from .crd_cel import evaluate, root_schema, rules_of, violations
from .helpers import job


def named(name: str, **spec) -> dict:
    doc = job(**spec)
    doc["metadata"]["name"] = name
    return doc


# (id, document, the error path both must report or None when valid, CEL path if it differs)
CASES = [
    ("defaults", job(), None, None),
    ("nodes=min=max", job(nodes=3, minNodes=3, maxNodes=3), None, None),
    ("elastic", job(nodes=2, minNodes=1, maxNodes=4), None, None),
    ("min=nodes<max", job(nodes=2, minNodes=2, maxNodes=3), None, None),
    ("min<nodes=max", job(nodes=3, minNodes=2, maxNodes=3), None, None),
    ("only min, at nodes", job(nodes=2, minNodes=2), None, None),
    ("only max, at nodes", job(nodes=2, maxNodes=2), None, None),
    ("min one above nodes", job(nodes=2, minNodes=3, maxNodes=4), "spec.minNodes", None),
    ("only min, above nodes", job(nodes=2, minNodes=3), "spec.minNodes", None),
    ("min above default nodes", job(minNodes=2), "spec.minNodes", None),
    ("max one below nodes", job(nodes=5, maxNodes=4), "spec.nodes", None),
    ("max below nodes and min", job(nodes=3, minNodes=3, maxNodes=2), "spec.nodes", None),
    ("mesh fixed", job(nodes=2, mesh={"fsdp": 2, "tp": 1}), None, None),
    ("mesh min=max=nodes", job(nodes=2, minNodes=2, maxNodes=2, mesh={"fsdp": 2, "tp": 1}), None, None),
    ("mesh elastic min", job(nodes=2, minNodes=1, mesh={"fsdp": 2, "tp": 1}), "spec.mesh", None),
    ("mesh elastic max", job(nodes=2, maxNodes=3, mesh={"fsdp": 2, "tp": 1}), "spec.mesh", None),
    ("builtin", job(trainer={"builtin": {"steps": 5}}), None, None),
    ("command and args", job(trainer={"command": ["/w/train.py"], "args": ["--lr", "1"]}), None, None),
    ("builtin and command", job(trainer={"builtin": {}, "command": ["t.py"]}), "spec.trainer", None),
    ("neither builtin nor command", job(trainer={}), "spec.trainer", None),
    ("args without command", job(trainer={"builtin": {}, "args": ["x"]}), "spec.trainer.args", "spec.trainer"),
    ("instrument auto", job(trainer={"command": ["/w/train.py"], "instrument": "auto", "instrumentImage": "i"}),
     None, None),
    ("instrument none with builtin", job(trainer={"builtin": {}, "instrument": "none"}), None, None),
    ("instrument auto with builtin", job(trainer={"builtin": {}, "instrument": "auto"}), "spec.trainer.instrument",
     "spec.trainer"),
    ("instrument image without auto", job(trainer={"command": ["t.py"], "instrumentImage": "i"}),
     "spec.trainer.instrumentImage", "spec.trainer"),
    ("nproc auto", job(nprocPerNode="auto"), None, None),
    ("nproc 1", job(nprocPerNode=1), None, None),
    ("nproc 0", job(nprocPerNode=0), "spec.nprocPerNode", None),
    ("nproc many", job(nprocPerNode="many"), "spec.nprocPerNode", None),
    ("nproc quoted number", job(nprocPerNode="4"), "spec.nprocPerNode", None),
    ("nproc 128", job(nprocPerNode=128), None, None),
    ("nproc 129", job(nprocPerNode=129), "spec.nprocPerNode", None),
    ("one pod, no claim", job(shared_claim=False), None, None),
    ("many pods with a claim", job(nodes=2), None, None),
    ("many pods, no claim", job(nodes=2, shared_claim=False), "spec.checkpoint", None),
    ("elastic up to two pods, no claim", job(maxNodes=2, shared_claim=False), "spec.checkpoint", None),
    ("many pods, an object store", job(nodes=2, checkpoint={"uri": "s3://team-ckpt/run"}), None, None),
    ("many pods, an object store with its secret and endpoint", job(nodes=2, checkpoint={
        "uri": "s3://team-ckpt/run", "secretRef": {"name": "s3"}, "endpoint": "http://minio:9000"}), None, None),
    ("many pods, storage none", job(nodes=2, checkpoint={"storage": "none"}), None, None),
    ("many pods of your own command, no claim",
     job(nodes=2, shared_claim=False, trainer={"command": ["python", "-m", "team.train"]}), None, None),
    ("uri and claim", job(checkpoint={"uri": "s3://team-ckpt/run", "claimName": "c"}),
     "spec.checkpoint.uri", "spec.checkpoint"),
    ("secretRef without uri", job(checkpoint={"secretRef": {"name": "s3"}}), "spec.checkpoint.secretRef",
     "spec.checkpoint"),
    ("endpoint without uri", job(checkpoint={"endpoint": "http://minio:9000"}), "spec.checkpoint.endpoint",
     "spec.checkpoint"),
    ("storage none and a claim", job(checkpoint={"storage": "none", "claimName": "c"}),
     "spec.checkpoint.storage", "spec.checkpoint"),
    ("name of 51", named("a" * 51, nodes=2, minNodes=1, maxNodes=1024), None, None),
    ("name of 52", named("a" * 52), "metadata.name", ""),
    ("name with a digit first", named("1job"), "metadata.name", ""),
    ("name ending in a dash", named("job-"), "metadata.name", ""),
    ("name with capitals", named("Job"), "metadata.name", ""),
    ("name with a dot", named("a.b"), "metadata.name", ""),
    ("one-letter name", named("a"), None, None),
]


def cel_paths(doc, old=None) -> set[str]:
    return {path.lstrip(".") for path, _ in violations(doc, old)}


@pytest.mark.parametrize("doc,path,cel_path", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cel_rules_and_the_validator_agree(doc, path, cel_path):
    python = {e.path for e in validate_document(doc).errors}
    cel = cel_paths(doc)
    if path is None:
        assert python == set() and cel == set(), (python, cel)
    else:
        assert path in python, python
        assert (path if cel_path is None else cel_path) in cel, cel


def test_every_cel_rule_is_exercised_by_the_table():
    """Each rule passes on some case and fails on another: a new rule needs cases here."""
    failing = {message for _, doc, *_ in CASES for _, message in violations(doc)}
    create_rules = [r for _, r in rules_of(root_schema()) if "oldSelf" not in r["rule"]]
    assert create_rules
    for rule in create_rules:
        assert rule["message"] in failing, f"no case breaks: {rule['rule']}"


def test_transition_rules_skip_creation_and_run_on_update():
    assert violations(job(image="a:1")) == []
    assert cel_paths(job(image="b:1"), old=job(image="a:1")) == {"spec.image"}


optional_count = st.one_of(st.none(), st.integers(1, 6))


@settings(max_examples=examples(200), deadline=None)
@given(nodes=optional_count, low=optional_count, high=optional_count)
def test_node_ranges_cel_and_validator_and_arithmetic_agree(nodes, low, high):
    spec = {k: v for k, v in (("nodes", nodes), ("minNodes", low), ("maxNodes", high)) if v is not None}
    doc = job(**spec)
    n = nodes if nodes is not None else 1
    expected = (low if low is not None else n) <= n <= (high if high is not None else n) \
        and (low is None or high is None or low <= high)
    assert validate_document(doc).ok == expected
    assert (cel_paths(doc) == set()) == expected


# ---- transition rules: a field may change while running iff the types say so --------

# (before, after) for every spec field; both valid on the base spec below.
CHANGES = {
    "image": ("repo/t:1", "repo/t:2"), "imagePullPolicy": ("IfNotPresent", "Always"),
    "trainer": ({"builtin": {}}, {"builtin": {"steps": 7}}),
    "env": ([{"name": "A", "value": "1"}], [{"name": "A", "value": "2"}]),
    "resources": ({"requests": {"cpu": 1}}, {"requests": {"cpu": 2}}),
    "strategy": ("ddp", "fsdp"), "mesh": ({"fsdp": 2, "tp": 1}, {"fsdp": 1, "tp": 2}),
    "precision": ("32", "bf16-mixed"), "accumulateGradBatches": (1, 2),
    "nodes": (2, 3), "minNodes": (1, 2), "maxNodes": (4, 5), "gpusPerNode": (0, 1),
    "gpuResourceName": ("nvidia.com/gpu", "amd.com/gpu"), "nprocPerNode": ("auto", 2),
    "devices": ({"className": "gpu.example.com", "count": 1}, {"className": "gpu.example.com", "count": 2}),
    "computeDomain": ({"allocationMode": "Single"}, {"allocationMode": "All"}),
    "rendezvous": ({"port": 29400}, {"port": 29401}), "maxRestarts": (3, 4), "backoffLimit": (6, 7),
    "checkpoint": ({"keep": 3}, {"keep": 4}), "suspend": (False, False),
    "activeDeadlineSeconds": (60, 120), "ttlSecondsAfterFinished": (60, 120),
    "cleanPodPolicy": ("All", "None"), "scheduling": ({"schedulerName": "a"}, {"schedulerName": "b"}),
    "podTemplate": ({"metadata": {"labels": {"a": "1"}}}, {"metadata": {"labels": {"a": "2"}}}),
    "metrics": ({"port": 9400}, {"port": 9401}),
    "failurePolicy": ({"nodeLostSeconds": 30}, {"nodeLostSeconds": 60}),
    "templateRef": ({"name": "cpu"}, {"name": "gpu-1"}),
}
SPEC_FIELDS = {json_name(f): meta_of(f).immutable_while_running for f, _ in fields_of(t.DistributedTrainingSpec)}


def test_the_change_table_covers_every_spec_field():
    assert set(CHANGES) == set(SPEC_FIELDS)


@pytest.mark.parametrize("field", sorted(CHANGES))
@pytest.mark.parametrize("suspended", [None, "before", "after"])
def test_fields_change_while_running_only_when_the_types_allow(field, suspended):
    before, after = CHANGES[field]
    base = {"nodes": 2, "maxNodes": 8} if field not in ("nodes", "maxNodes", "mesh") else {}
    old = job(**copy.deepcopy(base), **{field: before})
    new = job(**copy.deepcopy(base), **{field: after})
    if field == "suspend":
        assert cel_paths(new, old) == set()
        return
    if suspended == "before":
        old["spec"]["suspend"] = True
    elif suspended == "after":
        new["spec"]["suspend"] = True
    assert cel_paths(old) == set() and cel_paths(new) == set(), "the table's values must be valid"
    rejected = f"spec.{field}" in cel_paths(new, old)
    assert rejected == (SPEC_FIELDS[field] and suspended is None)


def test_adding_or_removing_an_immutable_field_counts_as_a_change():
    assert cel_paths(job(strategy="ddp"), old=job()) == {"spec.strategy"}
    assert cel_paths(job(), old=job(strategy="ddp")) == {"spec.strategy"}
    assert cel_paths(job(), old=job()) == set()


def test_nproc_rule_reads_int_or_string():
    rule = next(r for p, r in rules_of(root_schema()) if p == ".spec.nprocPerNode")["rule"]
    assert [evaluate(rule, v) for v in ("auto", 1, 64, 0, -1, "Auto", "")] == \
        [True, True, True, False, False, False, False]
