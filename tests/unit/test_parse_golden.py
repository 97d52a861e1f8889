"""Every word the parser says about hostile documents, pinned whole in
tests/unit/golden/parse_messages.json: the envelope (apiVersion, kind, metadata, namespace,
top-level keys), maps (nodeSelector: too many entries, keys that are not strings, values
too long or of the wrong type), bounds (exclusive minimum, maximum with and without its
reason), patterns and types. These lines are what `kubectl apply` users read in the
InvalidSpec condition and `disttrain validate` prints, so a changed word is a diff of the
golden file. After an intended change: DISTTRAIN_UPDATE_GOLDEN=1 pytest this file, then
read the diff. (Mutation testing found these messages unpinned: issue 14.)
"""

from __future__ import annotations

from typing import Any

import pytest

from disttrain_operator.api.meta import MAP_VALUE_MAX_LENGTH, FieldMeta, Shape
from disttrain_operator.api.names import MAX_NODES
from disttrain_operator.api.parse import parse_job, parse_object, parse_value
from disttrain_operator.api.types import DistributedTrainingSpec

from .golden import Golden
from .helpers import job

GOLDEN = Golden("parse_messages")


def without(key: str, **spec: Any) -> dict:
    doc = job(**spec)
    del doc[key]
    return doc


def with_(key: str, value: Any, **spec: Any) -> dict:
    return {**job(**spec), key: value}


def meta(**fields: Any) -> dict:
    doc = job()
    doc["metadata"] = fields
    return doc


DOCUMENTS: dict[str, Any] = {
    "not a mapping": "nodes: 2",
    "a list": [job()],
    "no apiVersion": without("apiVersion"),
    "another apiVersion": with_("apiVersion", "kubeflow.org/v1"),
    "no kind": without("kind"),
    "another kind": with_("kind", "PyTorchJob"),
    "no metadata": without("metadata"),
    "metadata is a list": with_("metadata", ["demo"]),
    "metadata without a name": meta(namespace="team-a"),
    "an empty name": meta(name="", namespace="team-a"),
    "a name too long for its pod names": meta(name="a" * 60, namespace="team-a"),
    "namespace not a DNS label": meta(name="demo", namespace="Team_A"),
    "namespace of 64 characters": meta(name="demo", namespace="n" * 64),
    "namespace of 63 characters": meta(name="demo", namespace="n" * 63),
    "namespace not a string": meta(name="demo", namespace=5),
    "no spec": without("spec"),
    "spec: null": with_("spec", None),
    "a spec field at the top level": with_("nodes", 2),
    "a misspelt top-level key": with_("spce", {}),
    "status is allowed": with_("status", {"phase": "Running"}),
    "apiVersion misspelt": {**without("apiVersion"), "apiVerison": "disttrain.dev/v1alpha1"},
    "kind misspelt": {**without("kind"), "knd": "DistributedTraining"},
    "metadata misspelt": {**without("metadata"), "metdata": {"name": "demo"}},
    "spec is a list": with_("spec", [{"nodes": 2}]),
    "an unknown spec field": job(nodez=2),
    "an env entry without its required name": job(env=[{"value": "x"}]),
    "nodeSelector with too many entries": job(scheduling={"nodeSelector": {f"k{i}": "v" for i in range(65)}}),
    "nodeSelector with 64 entries": job(scheduling={"nodeSelector": {f"k{i}": "v" for i in range(64)}}),
    "nodeSelector key not a string, then a bad value": job(scheduling={"nodeSelector": {1: "a", "zone": 5}}),
    "nodeSelector value not a string": job(scheduling={"nodeSelector": {"zone": 5}}),
    "nodeSelector value too long": job(scheduling={"nodeSelector": {"zone": "v" * (MAP_VALUE_MAX_LENGTH + 1)}}),
    "nodes above the maximum, with its reason": job(nodes=MAX_NODES + 1),
    "nodes 0": job(nodes=0),
    "nodes as a bool": job(nodes=True),
    "nodes as a float": job(nodes=2.0),
    "nodes quoted": job(nodes="2"),
    "learningRate 0 (exclusive minimum)": job(trainer={"builtin": {"learningRate": 0}}),
    "learningRate above its maximum": job(trainer={"builtin": {"learningRate": 11}}),
    "learningRate not finite": job(trainer={"builtin": {"learningRate": float("nan")}}),
    "checkpoint.path not absolute": job(checkpoint={"path": "ckpt"}),
    "env name of a bad format": job(env=[{"name": "1x", "value": "a"}]),
    "suspend quoted": job(suspend="true"),
    "a labels map of another type": job(podTemplate={"metadata": {"labels": ["a"]}}),
}

VALUES: dict[str, tuple[Shape, FieldMeta, Any]] = {
    "int_or_str given a bool": (Shape("int_or_str"), FieldMeta(doc="d"), True),
    "int_or_str given an int": (Shape("int_or_str"), FieldMeta(doc="d"), 8080),
    "int_or_str given a string": (Shape("int_or_str"), FieldMeta(doc="d"), "http"),
    "int_or_str given a float": (Shape("int_or_str"), FieldMeta(doc="d"), 1.5),
    "float given an int": (Shape("float"), FieldMeta(doc="d", minimum=0), 3),
    "float given a bool": (Shape("float"), FieldMeta(doc="d"), False),
    "only a minimum": (Shape("int"), FieldMeta(doc="d", minimum=1), 0),
    "only a maximum, without a reason": (Shape("int"), FieldMeta(doc="d", maximum=4), 5),
    "on the maximum": (Shape("int"), FieldMeta(doc="d", maximum=4, maximum_reason="r"), 4),
    "a pattern without a hint": (Shape("str"), FieldMeta(doc="d", pattern="^a+$"), "b"),
    "a map of anything": (Shape("map", inner=Shape("any")), FieldMeta(doc="d", max_items=1), {"a": 1, "b": [2]}),
    "a free-form map": (Shape("map", inner=Shape("str")), FieldMeta(doc="d", free_form=True), {"a": 1}),
}


def outcome_of_document(doc: Any) -> dict:
    parsed, errors = parse_job(doc)
    return {"parsed": parsed is not None, "errors": [str(e) for e in errors]}


def outcome_of_value(shape: Shape, field: FieldMeta, raw: Any) -> dict:
    value, errors = parse_value(shape, field, raw, "p")
    return {"value": repr(value), "errors": [str(e) for e in errors]}


def current() -> dict:
    return {"documents": {k: outcome_of_document(v) for k, v in DOCUMENTS.items()},
            "values": {k: outcome_of_value(*v) for k, v in VALUES.items()}}


def test_update_golden_when_asked():
    GOLDEN.update_or_check_keys(current, {"documents": DOCUMENTS, "values": VALUES})


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_document(name):
    assert outcome_of_document(DOCUMENTS[name]) == GOLDEN.want("documents", name)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_value(name):
    assert outcome_of_value(*VALUES[name]) == GOLDEN.want("values", name)


def test_a_document_that_parses_keeps_its_metadata():
    doc = job(nodes=2)
    doc["metadata"].update(uid="u-1", generation=4, labels={"team": "a"}, annotations={"note": "x"})
    parsed, errors = parse_job(doc)
    assert errors == []
    assert (parsed.name, parsed.namespace, parsed.uid, parsed.generation) == ("demo", "team-a", "u-1", 4)
    assert (parsed.labels, parsed.annotations) == ({"team": "a"}, {"note": "x"})
    assert parsed.spec.nodes == 2


def test_an_object_with_errors_is_none_not_half_built():
    value, errors = parse_object(DistributedTrainingSpec, {"nodes": "x"}, "spec")
    assert value is None and [str(e) for e in errors] == ["spec.nodes: must be an integer (got 'x')"]
