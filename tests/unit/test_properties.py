"""Properties over random and mutated specs, generated from the API types themselves."""

from __future__ import annotations

import copy
import json
import re

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disttrain_operator.api import InvalidSpec, load_job, validate_document
from disttrain_operator.api import types as t
from disttrain_operator.api.defaults import apply_defaults
from disttrain_operator.api.meta import Shape, fields_of, json_name, meta_of
from disttrain_operator.render import render_children

from .conftest import EXAMPLES

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
junk = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**40), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))


def value_for(shape: Shape, meta) -> st.SearchStrategy:
    """Mostly plausible values for a field, sometimes out of bounds or of the wrong type."""
    if shape.kind == "object":
        return object_for(shape.cls)
    if shape.kind == "enum":
        good = st.sampled_from(shape.values)
    elif shape.kind == "int":
        low = int(meta.minimum if meta.minimum is not None else 0)
        high = int(min(meta.maximum if meta.maximum is not None else 64, low + 64))
        good = st.integers(low - 1, high + 1)
    elif shape.kind == "float":
        good = st.floats(-1, 2, allow_nan=False)
    elif shape.kind == "bool":
        good = st.booleans()
    elif shape.kind == "int_or_str":
        good = st.one_of(st.integers(-1, 16), st.sampled_from(["auto", "8", "", "500m", "16Gi"]))
    elif shape.kind == "list":
        inner = (st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)
                 if meta.free_form else value_for(shape.inner, meta))
        if meta.list_map_keys:  # env: realistic names, some reserved, some duplicated
            inner = st.fixed_dictionaries({"name": st.sampled_from(["A", "B", "RANK", "PET_X", "HOME", "1x"])},
                                          optional={"value": st.one_of(st.text(max_size=4), st.integers())})
        good = st.lists(inner, max_size=3)
    elif shape.kind == "map":
        good = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "x"]),
                               st.one_of(st.integers(0, 9), st.sampled_from(["1", "2Gi", "bad", "500m"])),
                               max_size=3)
    else:
        good = st.text(max_size=20)
    return st.one_of(good, good, good, junk)


def object_for(cls) -> st.SearchStrategy:
    fields = {json_name(f): value_for(shape, meta_of(f)) for f, shape in fields_of(cls)}
    return st.fixed_dictionaries({}, optional=fields)


names = st.one_of(st.sampled_from(["demo", "a", "job-1", "x" * 51]), st.text(max_size=70))
documents = st.builds(
    lambda name, spec, ns: {"apiVersion": t.API_VERSION, "kind": t.KIND,
                            "metadata": {"name": name, **({"namespace": ns} if ns else {})}, "spec": spec},
    names, object_for(t.DistributedTrainingSpec), st.sampled_from([None, "team-a", "Bad_NS"]))


def mutate(doc: dict, data) -> dict:
    """Replace one leaf of a valid example with junk, or add an unknown key."""
    doc = copy.deepcopy(doc)
    node = doc
    while isinstance(node, dict) and node:
        key = data.draw(st.sampled_from(sorted(node)))
        if not isinstance(node[key], dict) or data.draw(st.booleans()):
            if data.draw(st.booleans()):
                node[key] = data.draw(junk)
            else:
                node[key + "x"] = data.draw(junk)
            break
        node = node[key]
    return doc


def check_invariants(doc) -> None:
    result = validate_document(doc)  # must not raise
    for error in result.errors:
        assert error.path, error
        assert str(error).startswith(error.path + ": "), str(error)
    for warning in result.warnings:
        assert warning.reason and warning.reason[0].isupper() and str(warning).startswith(warning.path)
    if not result.ok:
        assert result.resolved is None
        try:
            load_job(doc)
        except InvalidSpec as exc:
            assert exc.errors == result.errors
        else:
            raise AssertionError("load_job accepted an invalid spec")
        return
    job, resolved = result.job, result.resolved
    assert resolved.world_size == resolved.nodes * resolved.nproc_per_node
    assert resolved.min_nodes <= resolved.nodes <= resolved.max_nodes
    assert resolved.strategy in ("auto", "ddp", "fsdp")
    assert apply_defaults(job) == job  # defaulting is idempotent
    children = render_children(job, resolved)
    assert children == render_children(job, resolved)  # deterministic
    assert json.loads(json.dumps(children)) == children  # plain JSON, nothing exotic
    pods = [c for c in children if c["kind"] == "Pod"]
    assert len(pods) == resolved.nodes
    for pod in pods:
        assert DNS_LABEL.match(pod["metadata"]["name"]) and len(pod["metadata"]["name"]) <= 63
        assert pod["spec"]["hostname"] == pod["metadata"]["name"]
        env = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
        assert len(env) == len(set(env)), "duplicate env names"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_random_specs_never_crash_the_validator(doc):
    check_invariants(doc)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EXAMPLES), st.data())
def test_mutated_examples_never_crash_the_validator(path, data):
    doc = next(d for d in yaml.safe_load_all(open(path)) if d.get("kind") == t.KIND)
    check_invariants(mutate(doc, data))


@settings(max_examples=200, deadline=None)
@given(st.recursive(junk, lambda inner: st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10))
def test_arbitrary_values_never_crash_the_validator(doc):
    check_invariants(doc)
