"""The CRD is generated from the API types; the committed copy must not drift."""

from __future__ import annotations

import os
import re

import pytest

import yaml

from disttrain.api import k8s, schema, validate_document
from disttrain.api import types as t

from .conftest import ROOT
from .helpers import job

CRD_FILE = os.path.join(ROOT, "manifests", "crd", "disttrain.dev_distributedtrainings.yaml")


def openapi() -> dict:
    return schema.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_committed_crd_matches_the_api_types():
    # Built from scratch: the inlined Kubernetes schemas are cached, and an earlier caller filled the cache.
    k8s._inlined.cache_clear()
    with open(CRD_FILE) as handle:
        committed = yaml.safe_load(handle)
    assert committed == schema.crd(), "manifests/crd drifted from api/types.py: run `make crd`"


def without_descriptions(node: dict) -> dict:
    out = {k: v for k, v in node.items() if k != "description"}
    if "properties" in out:
        out["properties"] = {k: without_descriptions(v) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = without_descriptions(out[key])
    return out


@pytest.mark.parametrize("name", [k8s.POD_SPEC, k8s.AFFINITY, k8s.TOLERATION, k8s.ENV_VAR_SOURCE])
def test_the_offline_check_reads_the_schema_the_crd_carries(name):
    """`disttrain validate` checks Kubernetes fields against the same inlined, bounded schema
    the CRD embeds, less the descriptions."""
    k8s._inlined.cache_clear()
    offline = k8s._inlined(name, False)
    assert offline == without_descriptions(k8s.schema(name))
    assert "description" in k8s.schema(name)


def test_a_partial_schema_drops_only_the_top_required():
    assert k8s.schema(k8s.POD_SPEC)["required"] == ["containers"]
    partial = k8s.schema(k8s.POD_SPEC, partial=True)
    assert "required" not in partial and partial["properties"]["containers"]["items"]["required"] == ["name"]
    assert "required" not in k8s.schema(k8s.AFFINITY, partial=True)  # none to drop


def test_descriptions_are_kept_to_the_given_depth_through_maps_and_lists():
    def node(text: str, **more) -> dict:
        return {"description": text, **more}
    tree = node("0", properties={"m": node("1", additionalProperties=node("1m", properties={"x": node("2")})),
                                 "l": node("1", items=node("1i", properties={"y": node("2")}))})
    k8s._drop_descriptions(tree, 1)
    assert tree == node("0", properties={"m": node("1", additionalProperties=node("1m", properties={"x": {}})),
                                         "l": node("1", items=node("1i", properties={"y": {}}))})


def test_the_offline_check_on_the_smallest_schemas():
    """What check() reads from a node, and what it does when a keyword is absent."""
    def errors(node: dict, value) -> list[str]:
        found: list = []
        k8s._check(node, value, "p", found)
        return [str(e) for e in found]
    assert errors({"type": "array"}, [1, "x"]) == []  # no items, no maxItems: anything, any length
    assert errors({"type": "object"}, {"a": 1}) == ["p.a: is not a known field (got 1); allowed: the Kubernetes "
                                                    f"{k8s.KUBERNETES_VERSION} fields here. Fix: remove it "
                                                    "(see `kubectl explain` for p)"]
    assert errors({"type": "object", "additionalProperties": {"type": "string"}}, {f"k{i}": "v" for i in range(99)}) == []
    assert errors({"type": "array", "maxItems": 2, "items": {"type": "string"}}, ["a", "b"]) == []
    assert errors({"type": "array", "maxItems": 2}, ["a", "b", "c"]) == [
        "p: has too many items (got '3 items'); allowed: at most 2. Fix: remove some"]
    # a whole definition names its top-level required fields unless partial
    assert [str(e) for e in k8s.check(k8s.POD_SPEC, {}, "p")] == [
        "p.containers: is required (not set). Fix: set p.containers"]
    assert k8s.check(k8s.POD_SPEC, {}, "p", partial=True) == []


def walk(node: dict, path: str):
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")


def test_every_field_is_documented_and_the_doc_starts_with_its_name():
    ours = set(schema.field_paths()) | {"spec"}
    for path, node in walk(openapi()["properties"]["spec"], "spec"):
        if path.replace("[]", "") not in ours:
            continue  # inside a Kubernetes type: its own documentation (api/k8s.py)
        if path.endswith("[]") and "properties" not in node:
            continue  # plain or pass-through items are described by their list
        assert node.get("description"), f"{path} has no description"
        leaf = path.rsplit(".", 1)[-1]
        if not leaf.endswith("[]") and path != "spec":
            assert node["description"].startswith(f"{leaf}:"), path


def walk_all(node: dict, path: str):
    """Every schema node, maps' value schemas included."""
    yield from ((p, n) for p, n in walk(node, path))
    for p, n in list(walk(node, path)):
        if isinstance(n.get("additionalProperties"), dict):
            yield from walk_all(n["additionalProperties"], f"{p}{{}}")


def test_every_list_string_and_map_is_bounded_and_nothing_is_free_form():
    for path, node in walk_all(openapi()["properties"]["spec"], "spec"):
        assert not node.get("x-kubernetes-preserve-unknown-fields"), f"{path} is free-form"
        kind = node.get("type")
        if kind == "array":
            assert "maxItems" in node, f"{path} has no maxItems"
        elif kind == "string":
            assert {"maxLength", "enum"} & set(node), f"{path} has no maxLength"
        elif kind == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, f"{path} has no maxProperties"


def test_the_crd_fits_client_side_apply():
    """`kubectl apply` (client-side) stores the object's JSON in an annotation, and all
    annotations of an object must fit in 256 KiB; etcd stores at most about 1.5 MiB."""
    import json

    size = len(json.dumps(schema.crd(), separators=(",", ":")))
    assert size < 200 * 1024, f"the CRD is {size} bytes of JSON"
    assert size > 60 * 1024  # the Kubernetes types are really embedded
    said = re.search(r"about (\d+) KiB of JSON", open(os.path.join(ROOT, "charts", "disttrain", "README.md")).read())
    assert said and abs(int(said.group(1)) - size / 1024) <= 5, (
        f"charts/disttrain/README.md says {said and said.group(0)!r}; it is {size / 1024:.0f} KiB")


def test_kubernetes_fields_are_typed_from_the_pinned_openapi():
    props = openapi()["properties"]["spec"]["properties"]
    affinity = props["scheduling"]["properties"]["affinity"]
    term = affinity["properties"]["nodeAffinity"]["properties"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expression = term["properties"]["nodeSelectorTerms"]["items"]["properties"]["matchExpressions"]["items"]
    assert expression["properties"]["operator"]["enum"] == ["DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"]
    assert expression["required"] == ["key", "operator"]
    tolerations = props["scheduling"]["properties"]["tolerations"]
    assert tolerations["maxItems"] == 64 and "effect" in tolerations["items"]["properties"]
    pod = props["podTemplate"]["properties"]["spec"]
    assert "required" not in pod and pod["properties"]["containers"]["items"]["required"] == ["name"]
    assert "ephemeralContainers" not in pod["properties"] and "hostPath" in \
        pod["properties"]["volumes"]["items"]["properties"]
    assert props["env"]["items"]["properties"]["valueFrom"]["properties"]["secretKeyRef"]["required"] == ["key"]


def test_schema_is_structural():
    for path, node in walk(openapi(), ""):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"


def test_the_schema_defaults_only_the_size_and_the_operator_applies_the_rest():
    """A stored spec holds what its writers set: the API server fills in no default but
    `nodes` (the scale subresource reads it), so a training template's default or enforced
    value is never hidden or contradicted by one it filled in; the operator applies the
    defaults when it reads the job, as `disttrain validate` does."""
    spec = validate_document(job()).job.spec
    props = openapi()["properties"]["spec"]["properties"]
    assert props["nodes"]["default"] == spec.nodes
    ours = set(schema.field_paths())  # not inside the Kubernetes types: their list-map keys must keep theirs
    defaulted = [path for path, node in walk(openapi()["properties"]["spec"], "spec")
                 if "default" in node and path.replace("[]", "") in ours]
    assert defaulted == ["spec.nodes"], defaulted
    assert (spec.rendezvous.port, spec.checkpoint.keep, spec.trainer.builtin.steps) == (29400, 3, 100)
    last_call = props["rendezvous"]["properties"]["lastCallTimeoutSeconds"]
    assert "default" not in last_call and spec.rendezvous.last_call_timeout_seconds == 30


def test_bounds_and_enums_come_from_the_types():
    props = openapi()["properties"]["spec"]["properties"]
    assert props["strategy"]["enum"] == ["auto", "ddp", "fsdp", "fsdp_native"]
    assert props["precision"]["enum"] == ["bf16-mixed", "16-mixed", "32"]
    assert props["cleanPodPolicy"]["enum"] == ["All", "Running", "None"]
    assert props["accumulateGradBatches"]["minimum"] == 1
    assert props["gpusPerNode"]["minimum"] == 0
    assert props["env"]["x-kubernetes-list-type"] == "map"
    assert props["env"]["x-kubernetes-list-map-keys"] == ["name"]
    assert props["nprocPerNode"]["x-kubernetes-int-or-string"] is True


def test_cel_rules_cover_the_cross_field_invariants():
    spec = openapi()["properties"]["spec"]
    rules = " ".join(r["rule"] for r in spec["x-kubernetes-validations"])
    assert "self.minNodes <= self.nodes" in rules and "self.nodes <= self.maxNodes" in rules
    assert "has(self.mesh)" in rules
    trainer_rules = [r["rule"] for r in spec["properties"]["trainer"]["x-kubernetes-validations"]]
    assert "has(self.builtin) != has(self.command)" in trainer_rules
    immutable = [r["fieldPath"] for r in spec["x-kubernetes-validations"] if "oldSelf" in r["rule"]]
    assert ".image" in immutable and ".strategy" in immutable and ".nodes" not in immutable


def test_subresources_names_and_printer_columns():
    crd = schema.crd()
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["names"]["shortNames"] == ["dt", "dtrain"]
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.nodes"
    columns = [c["name"].upper() for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["PHASE", "NODES", "WORLD", "STEP", "PROGRESS", "SAMPLES/S", "CHECKPOINT", "RESTARTS", "AGE"]


def test_every_status_field_of_the_design_exists():
    status = openapi()["properties"]["status"]["properties"]
    for name in ("phase", "conditions", "resolved", "warnings", "workers", "restarts", "progress",
                 "checkpoint", "startTime", "completionTime", "observedGeneration"):
        assert name in status, name
    assert set(status["resolved"]["properties"]) >= {"strategy", "nodes", "minNodes", "maxNodes",
                                                      "nprocPerNode", "worldSize", "precision"}
    assert set(status["workers"]["properties"]) == {"desired", "active", "running", "ready", "succeeded", "failed"}
    assert set(status["progress"]["properties"]) >= {"step", "totalSteps", "loss", "samplesPerSecond"}
    assert set(status["checkpoint"]["properties"]) == {"step", "time", "path"}
    assert t.KIND == "DistributedTraining"


def test_committed_api_reference_matches_the_api_types():
    from disttrain.api.reference import api_reference

    with open(os.path.join(ROOT, "docs", "api.md")) as handle:
        assert handle.read() == api_reference(), "docs/api.md drifted: run `make docs`"
