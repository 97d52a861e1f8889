"""The parser's words for bad and hostile documents, pinned whole: every error names the
field, the value, what is allowed and the fix. The envelope (apiVersion, kind, metadata,
namespace, top-level keys), names that are not strings or DNS labels, values of the wrong
type, maps and lists too long or holding a key twice, bounds, patterns. The table tests
pin single lines; tests/unit/golden/parse_messages.json pins the rest (after an intended
change: DISTTRAIN_UPDATE_GOLDEN=1 pytest this file, then read the diff). These lines are
what `disttrain validate` prints and the job's InvalidSpec condition shows."""

from __future__ import annotations

from typing import Any

import pytest
from disttrain.api import InvalidSpec, load_job, validate_document
from disttrain.api.meta import MAP_VALUE_MAX_LENGTH, FieldMeta, Shape
from disttrain.api.names import MAX_JOB_NAME_LENGTH, MAX_NODES
from disttrain.api.parse import (_parse_list, _suggest_name, _type_error, check_job_name, dump_object, parse_job,
                                 parse_object, parse_value)
from disttrain.api.types import DistributedTrainingSpec

from .golden import Golden
from .helpers import errors_of, job


def test_unknown_field_suggests_the_right_name():
    (message,) = errors_of(job(precison="32"))
    assert message.startswith("spec.precison: is not a known field (got '32')")
    assert "did you mean 'precision'?" in message


def test_enum_value_suggests_the_closest_choice():
    (message,) = errors_of(job(strategy="ddpp"))
    assert message == ("spec.strategy: is not allowed (got 'ddpp'); allowed: auto, ddp, fsdp, "
                       "fsdp_native. Fix: did you mean 'ddp'?")


def test_enum_value_in_the_wrong_case_says_so():
    (message,) = errors_of(job(strategy="DDP"))
    assert "use 'ddp' (values are case-sensitive)" in message


@pytest.mark.parametrize("spec,start", [
    ({"nodes": "2"}, "spec.nodes: must be an integer (got '2'). Fix: drop the quotes: 2"),
    ({"nodes": 0}, "spec.nodes: is out of range (got 0); allowed: >= 1 and <= 1024"),
    ({"gpusPerNode": -1}, "spec.gpusPerNode: is out of range (got -1)"),
    ({"suspend": "yes"}, "spec.suspend: must be true or false (got 'yes')"),
    ({"precision": 32}, "spec.precision: must be a string (got 32). Fix: quote it: \"32\""),
    ({"env": [{"name": "A", "value": 8}]}, "spec.env[0].value: must be a string (got 8). Fix: quote it: \"8\""),
    ({"env": [{"value": "x"}]}, "spec.env[0].name: is required (not set)"),
    ({"trainer": {"builtin": {"learningRate": 0}}}, "spec.trainer.builtin.learningRate: is out of range (got 0); allowed: > 0"),
    ({"checkpoint": {"path": "relative"}}, "spec.checkpoint.path: has an invalid format (got 'relative'); allowed: an absolute path"),
    ({"mesh": {"fsdp": 2}}, "spec.mesh.tp: is required (not set)"),
    ({"gpuResourceName": "nvidia com/gpu"}, "spec.gpuResourceName: has an invalid format"),
    ({"rendezvous": {"port": 70000}}, "spec.rendezvous.port: is out of range (got 70000); allowed: >= 1 and <= 65535"),
    ({"scheduling": {"nodeSelector": {"gpu": True}}}, "spec.scheduling.nodeSelector.gpu: must be a string"),
    ({"resources": []}, "spec.resources: must be a mapping"),
])
def test_type_and_bound_errors(spec, start):
    messages = errors_of(job(**spec))
    assert any(m.startswith(start) for m in messages), messages


def test_duplicate_env_names_are_an_error():
    (message,) = errors_of(job(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]))
    assert message.startswith("spec.env[1].name: is duplicated (got 'A')")


def test_wrong_api_version_and_kind():
    doc = job()
    doc["apiVersion"], doc["kind"] = "kubeflow.org/v1", "PyTorchJob"
    messages = errors_of(doc)
    assert "apiVersion: is not ours (got 'kubeflow.org/v1'); allowed: disttrain.dev/v1alpha1" in messages[0]
    assert messages[1].startswith("kind: is not ours (got 'PyTorchJob')")


def test_fields_outside_spec_are_reported():
    doc = job()
    doc["nodes"] = 2
    (message,) = errors_of(doc)
    assert message.startswith("nodes: is not a top-level field") and "indent it under spec" in message


def test_missing_name():
    doc = job()
    del doc["metadata"]["name"]
    assert errors_of(doc) == ["metadata.name: is required (not set); allowed: a DNS label. Fix: set metadata.name: my-job"]


def test_not_a_mapping():
    assert errors_of(["a", "list"])[0].startswith("(document): is not a mapping")


def test_every_error_is_collected_not_just_the_first():
    assert len(errors_of(job(nodes=0, strategy="x", precision="64"))) == 3


def test_load_job_raises_only_invalid_spec_with_all_errors():
    with pytest.raises(InvalidSpec) as info:
        load_job(job(nodes=0, strategy="x"))
    assert len(info.value.errors) == 2
    assert "spec.nodes" in str(info.value)


def test_valid_spec_gets_documented_defaults():
    spec = validate_document(job()).job.spec
    assert spec.nodes == 1 and spec.gpus_per_node == 0 and spec.nproc_per_node == "auto"
    assert spec.rendezvous.port == 29400 and spec.rendezvous.backend == "c10d"
    assert spec.checkpoint.path == "/checkpoints" and spec.checkpoint.keep == 3
    assert spec.trainer.builtin.model == "gpt-nano" and spec.trainer.builtin.dataset == "text"
    assert spec.clean_pod_policy == "Running" and spec.backoff_limit == 6
    assert spec.metrics.port == 9400


@pytest.mark.parametrize("spec,start", [
    ({"scheduling": {"affinity": {"nodeAfinity": {}}}},
     "spec.scheduling.affinity.nodeAfinity: is not a known field (got {}); allowed: the Kubernetes v1.37.1 fields "
     "here. Fix: did you mean 'nodeAffinity'?"),
    ({"scheduling": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "in"}]}]}}}}},
     "spec.scheduling.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator: is not allowed (got 'in'); allowed: DoesNotExist, Exists, Gt, In, Lt, NotIn. "
     "Fix: use 'In' (values are case-sensitive)"),
    ({"scheduling": {"tolerations": [{"key": "gpu", "effect": "NoSchedul"}]}},
     "spec.scheduling.tolerations[0].effect: is not allowed (got 'NoSchedul')"),
    ({"scheduling": {"tolerations": [{"tolerationSeconds": "60"}]}},
     "spec.scheduling.tolerations[0].tolerationSeconds: must be an integer (got '60')"),
    ({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]},
     "spec.env[0].valueFrom.secretKeyRef.key: is required (not set)"),
    ({"podTemplate": {"spec": {"containers": [{"image": "x"}]}}},
     "spec.podTemplate.spec.containers[0].name: is required (not set)"),
    ({"podTemplate": {"spec": {"ephemeralContainers": [{"name": "x"}]}}},
     "spec.podTemplate.spec.ephemeralContainers: is not a known field"),
    ({"podTemplate": {"spec": {"volumes": [{"name": "v", "cephfs": {"monitors": ["m"]}}]}}},
     "spec.podTemplate.spec.volumes[0].cephfs: is not a known field"),
    ({"podTemplate": {"spec": {"containers": [{"name": "s", "args": ["x"] * 1025}]}}},
     "spec.podTemplate.spec.containers[0].args: has too many items (got '1025 items'); allowed: at most 1024"),
])
def test_kubernetes_fields_are_checked_offline_like_the_api_server(spec, start):
    messages = errors_of(job(**spec))
    assert any(m.startswith(start) for m in messages), messages


NOT_A_STRING = "metadata.name: must be a string (got {}); allowed: a DNS label. Fix: "


@pytest.mark.parametrize(("name", "shown", "fix"), [
    (True, "True", 'quote it: name: "true"'),
    (False, "False", 'quote it: name: "false"'),
    (12, "12", "rename it, e.g. 'job-12'"),
    (1.5, "1.5", "rename it, e.g. 'job-1-5'"),
    (10**30 - 1, str(10**30 - 1), f"rename it, e.g. 'job-{10**30 - 1}'"),
    # too large to echo: the hint falls back to a neutral name
    (10**30, "<an integer of 100 bits>", 'quote it: name: "my-job"'),
    (-10**30, "<an integer of 100 bits>", 'quote it: name: "my-job"'),
    ([1], "[1]", 'quote it: name: "my-job"'),
])
def test_a_name_that_is_not_a_string(name, shown, fix):
    assert [str(e) for e in check_job_name(name)] == [NOT_A_STRING.format(shown) + fix]


@pytest.mark.parametrize(("name", "suggestion"), [
    ("My_Job!!x", "my-job-x"),  # a run of other characters is one '-'
    ("9lives", "job-9lives"),  # a letter in front
    ("---", "job"),
    ("ÄBCd", "bcd"),  # non-ASCII letters dropped
    ("x" * (MAX_JOB_NAME_LENGTH - 1) + "-y", "x" * (MAX_JOB_NAME_LENGTH - 1)),  # cut, no '-' at the end
    ("a" * 60, "a" * MAX_JOB_NAME_LENGTH),
    ("A1_x", "a1-x"),  # only the first character must be a letter
    ("7!", "job-7"),
    # only the first 4 x the limit is read (a hostile megabyte name costs nothing)
    ("-" * (4 * MAX_JOB_NAME_LENGTH) + "abc", "job"),
    ("-" * (4 * MAX_JOB_NAME_LENGTH - 1) + "abc", "a"),
])
def test_suggested_names_are_dns_labels_close_to_the_input(name, suggestion):
    assert _suggest_name(name) == suggestion


def test_a_name_that_is_no_dns_label_gets_a_suggestion():
    assert [str(e) for e in check_job_name("Bad_Name")] == [
        "metadata.name: is not a valid DNS-1035 label (got 'Bad_Name'); allowed: lowercase letters, digits and "
        "'-', starting with a letter and ending with a letter or digit (it names a Service). Fix: rename it, "
        "e.g. 'bad-name'"]


@pytest.mark.parametrize(("kind", "raw", "line"), [
    ("str", 5, 'p: must be a string (got 5). Fix: quote it: "5"'),
    ("str", True, 'p: must be a string (got True). Fix: quote it: "true"'),
    ("enum", 1.5, 'p: must be a string (got 1.5). Fix: quote it: "1.5"'),
    ("enum", [], "p: must be a string (got []). Fix: write p as a string"),
    ("int", " 42 ", "p: must be an integer (got ' 42 '). Fix: drop the quotes: 42"),
    ("int", "4x", "p: must be an integer (got '4x'). Fix: write p as an integer"),
    ("int", 4.0, "p: must be an integer (got 4.0). Fix: write 4 (no decimal point)"),
    ("bool", "yes", "p: must be true or false (got 'yes'). Fix: write true or false without quotes"),
    ("bool", 1, "p: must be true or false (got 1). Fix: write p as true or false"),
    ("float", float("inf"), "p: is not a finite number (got inf); allowed: a finite number. Fix: write a number "
                            "such as 0.001"),
    ("float", "x", "p: must be a number (got 'x'). Fix: write p as a number"),
    ("list", 3, "p: must be a list (got 3). Fix: write p as a list"),
    ("map", [], "p: must be a mapping (got []). Fix: write p as a mapping"),
    ("int_or_str", True, "p: must be an integer or a string (got True). Fix: write p as an integer or a "
                       "string"),
])
def test_type_errors_say_what_was_expected_and_how_to_write_it(kind, raw, line):
    assert str(_type_error(kind, raw, "p")) == line


STRINGS = Shape("list", inner=Shape("str"))


ANYTHING = Shape("list", inner=Shape("any"))


def parsed(shape, meta, raw, path="p"):
    value, errors = _parse_list(shape, meta, raw, path)
    return value, [str(e) for e in errors]


def test_max_items_is_inclusive_and_counts_items():
    meta = FieldMeta(doc="d", max_items=2)
    assert parsed(STRINGS, meta, ["a", "b"]) == (["a", "b"], [])
    assert parsed(STRINGS, meta, ["a", "b", "c"]) == (
        ["a", "b", "c"], ["p: has too many items (got '3 items'); allowed: at most 2. Fix: remove some"])
    assert parsed(STRINGS, FieldMeta(doc="d"), ["a"] * 1000)[1] == []  # no limit set


def test_items_are_checked_by_the_item_rules_not_the_lists():
    """The list's own required, pattern and max_items do not apply to each item; its
    length and type rules do."""
    meta = FieldMeta(doc="d", max_items=2, required=True, pattern="^a$", max_length=1)
    assert parsed(STRINGS, meta, ["a", "b", "bb", 3]) == (["a", "b", "bb", None], [
        "p: has too many items (got '4 items'); allowed: at most 2. Fix: remove some",
        "p[2]: is 2 characters long (got 'bb'); allowed: at most 1. Fix: shorten it",
        'p[3]: must be a string (got 3). Fix: quote it: "3"'])


def test_a_list_map_names_each_duplicate_and_its_first():
    meta = FieldMeta(doc="d", list_map_keys=("name",))
    raw = [{"name": "x"}, {"name": "y"}, {"name": "x"}, {"v": 1}, {"v": 2}, "s", {"name": "x"}, {"name": None}]
    value, errors = parsed(ANYTHING, meta, raw, "env")
    assert value == raw
    assert errors == [  # entries without the key (or not mappings) are not duplicates of each other
        "env[2].name: is duplicated (got 'x'); allowed: each name once. Fix: merge it with env[0]",
        "env[6].name: is duplicated (got 'x'); allowed: each name once. Fix: merge it with env[0]"]


def test_free_form_items_are_checked_against_their_kubernetes_schema():
    meta = FieldMeta(doc="d", free_form=True, k8s="io.k8s.api.core.v1.Toleration")
    raw = [{"key": "a"}, {"operator": "Bogus", "tolerationSeconds": "x"}]
    assert parsed(ANYTHING, meta, raw, "t") == (raw, [
        "t[1].operator: is not allowed (got 'Bogus'); allowed: Equal, Exists, Gt, Lt. Fix: set t[1].operator to one of "
        "the allowed values (`kubectl explain dt.t.operator` says what each does)",
        "t[1].tolerationSeconds: must be an integer (got 'x'). Fix: write t[1].tolerationSeconds as an integer"])
    # free-form without a schema: mappings pass as written, other items by the item shape
    assert parsed(Shape("list", inner=Shape("int")), FieldMeta(doc="d", free_form=True), [{"a": 1}, 5, "x"], "t") == (
        [{"a": 1}, 5, None], ["t[2]: must be an integer (got 'x'). Fix: write t[2] as an integer"])


def test_dump_object_keeps_map_values():
    assert dump_object({"a": [1, {"b": None}], "c": "d"}) == {"a": [1, {"b": None}], "c": "d"}


def test_a_list_of_lists_gives_its_items_neither_its_length_limit_nor_its_keys():
    nested = Shape("list", inner=Shape("list", inner=Shape("any")))
    meta = FieldMeta(doc="d", max_items=1, list_map_keys=("name",))
    rows = [[{"name": "x"}, {"name": "x"}, {"name": "y"}]]
    assert parsed(nested, meta, rows) == (rows, [])


def test_every_free_form_item_error_is_kept_beside_the_length_error():
    meta = FieldMeta(doc="d", free_form=True, k8s="io.k8s.api.core.v1.Toleration", max_items=1)
    raw = [{"operator": "Bogus"}, {"tolerationSeconds": "x"}]
    assert parsed(ANYTHING, meta, raw, "t")[1] == [
        "t: has too many items (got '2 items'); allowed: at most 1. Fix: remove some",
        "t[0].operator: is not allowed (got 'Bogus'); allowed: Equal, Exists, Gt, Lt. Fix: set t[0].operator to one of "
        "the allowed values (`kubectl explain dt.t.operator` says what each does)",
        "t[1].tolerationSeconds: must be an integer (got 'x'). Fix: write t[1].tolerationSeconds as an integer"]


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
    assert value is None and [str(e) for e in errors] == ["spec.nodes: must be an integer (got 'x'). Fix: write spec.nodes as an integer"]
