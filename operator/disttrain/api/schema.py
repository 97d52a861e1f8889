"""api/types.py and api/status_types.py -> the CustomResourceDefinition (openAPIV3Schema + CEL rules).

`disttrain crd` prints it; manifests/crd/ holds the committed copy and a test fails when
they drift. Bounds, enums and defaults come from the field metadata; the cross-field
rules below are the ones the API server can check before anything is stored.
"""

from __future__ import annotations

from typing import Any

from disttrain.api import k8s
from disttrain.api import types as t
from disttrain.api.columns import JOB_COLUMNS
from disttrain.api.status_types import DistributedTrainingStatus
from disttrain.api.meta import MAP_VALUE_MAX_LENGTH, Shape, fields_of, json_name, meta_of
from disttrain.api.names import MAX_JOB_NAME_LENGTH

# Cross-field rules on spec. Messages say what to do, as every error here must.
SPEC_RULES: list[dict[str, str]] = [
    {"rule": "!has(self.minNodes) || self.minNodes <= self.nodes",
     "message": "minNodes must be <= nodes: lower spec.minNodes or raise spec.nodes",
     "fieldPath": ".minNodes"},
    {"rule": "!has(self.maxNodes) || self.nodes <= self.maxNodes",
     "message": "nodes must be <= maxNodes: raise spec.maxNodes or lower spec.nodes",
     "fieldPath": ".nodes"},
    {"rule": "!has(self.minNodes) || !has(self.maxNodes) || self.minNodes <= self.maxNodes",
     "message": "minNodes must be <= maxNodes: the elastic range is minNodes..maxNodes",
     "fieldPath": ".minNodes"},
    {"rule": "!has(self.mesh) || ((!has(self.minNodes) || self.minNodes == self.nodes) && "
             "(!has(self.maxNodes) || self.maxNodes == self.nodes))",
     "message": "mesh needs a fixed world size: remove spec.minNodes/spec.maxNodes or set "
                "both equal to spec.nodes",
     "fieldPath": ".mesh"},
    {"rule": "(has(self.maxNodes) ? self.maxNodes : self.nodes) <= 1 || "
             "(has(self.trainer) && has(self.trainer.command)) || "
             "(has(self.checkpoint) && (has(self.checkpoint.claimName) || has(self.checkpoint.uri) || "
             "(has(self.checkpoint.storage) && self.checkpoint.storage == 'none')))",
     "message": "checkpoint.uri or checkpoint.claimName is required when the built-in trainer can "
                "have more than one pod: set uri: s3://<bucket>/<prefix>, or claimName: a "
                "ReadWriteMany PersistentVolumeClaim, or storage: none, or run one pod",
     "fieldPath": ".checkpoint"},
]

TRAINER_RULES = [
    {"rule": "has(self.builtin) != has(self.command)",
     "message": "set exactly one of trainer.builtin (the shipped trainer) or "
                "trainer.command (your script)"},
    {"rule": "!has(self.args) || has(self.command)",
     "message": "trainer.args is only used with trainer.command: move the arguments or "
                "set command"},
    {"rule": "!has(self.instrument) || self.instrument == 'none' || has(self.command)",
     "message": "trainer.instrument is for your own command: the built-in trainer reports on its own; "
                "remove instrument"},
    {"rule": "!has(self.instrumentImage) || (has(self.instrument) && self.instrument == 'auto')",
     "message": "trainer.instrumentImage is only used with instrument: auto: set it or remove instrumentImage"},
]

CHECKPOINT_RULES = [
    {"rule": "!has(self.uri) || !has(self.claimName)",
     "message": "set one of checkpoint.uri (object storage) or checkpoint.claimName (a volume), not both"},
    {"rule": "has(self.uri) || (!has(self.secretRef) && !has(self.endpoint))",
     "message": "checkpoint.secretRef and checkpoint.endpoint only apply to an object store: set "
                "checkpoint.uri or remove them"},
    {"rule": "!has(self.storage) || self.storage != 'none' || (!has(self.uri) && !has(self.claimName))",
     "message": "checkpoint.storage none keeps no checkpoints: remove uri and claimName, or storage: none"},
]

NPROC_RULE = {
    "rule": f"type(self) == string ? self == 'auto' : self >= 1 && self <= {t.MAX_NPROC_PER_NODE}",
    "message": f"nprocPerNode must be an integer from 1 to {t.MAX_NPROC_PER_NODE} or the string auto",
}

ROOT_RULES = [
    {"rule": f"size(self.metadata.name) <= {MAX_JOB_NAME_LENGTH}",
     "message": f"metadata.name must be at most {MAX_JOB_NAME_LENGTH} characters so that "
                "pod names <name>-worker-<i> stay valid DNS labels (63): choose a shorter name"},
    {"rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
     "message": "metadata.name must start with a lowercase letter and contain only "
                "lowercase letters, digits and '-' (it names a Service): rename the job"},
]


def immutability_rules() -> list[dict[str, str]]:
    """One transition rule per field that cannot change while pods run."""
    rules = []
    for f, _ in fields_of(t.DistributedTrainingSpec):
        if not meta_of(f).immutable_while_running:
            continue
        name = json_name(f)
        unchanged = (f"(has(self.{name}) ? (has(oldSelf.{name}) && self.{name} == "
                     f"oldSelf.{name}) : !has(oldSelf.{name}))")
        rules.append({
            "rule": f"(has(oldSelf.suspend) && oldSelf.suspend) || "
                    f"(has(self.suspend) && self.suspend) || {unchanged}",
            "message": f"spec.{name} cannot change while the job runs: set spec.suspend: "
                       "true, change it, then set suspend: false to resume from the newest "
                       "checkpoint",
            "fieldPath": f".{name}",
        })
    return rules


def schema_for(cls: type) -> dict[str, Any]:
    """openAPIV3Schema of one dataclass (an object with documented properties)."""
    props: dict[str, Any] = {}
    required = []
    for f, shape in fields_of(cls):
        meta = meta_of(f)
        prop = _shape_schema(shape, meta.free_form, meta)
        prop["description"] = meta.doc
        _add_bounds(prop, shape, meta)
        if meta.default is not None:
            prop["default"] = meta.default
        if meta.required:
            required.append(json_name(f))
        props[json_name(f)] = prop
    out: dict[str, Any] = {"type": "object", "description": (cls.__doc__ or "").strip(),
                           "properties": props}
    if required:
        out["required"] = required
    return out


def _shape_schema(shape: Shape, free_form: bool, meta: Any = None) -> dict[str, Any]:
    if meta is not None and meta.k8s is not None:
        typed = k8s.schema(meta.k8s, partial=meta.k8s_partial, description_depth=meta.k8s_description_depth)
        return {"type": "array", "items": typed} if shape.kind == "list" else typed
    if shape.kind == "object":
        return schema_for(shape.cls)
    if shape.kind == "enum":
        return {"type": "string", "enum": list(shape.values)}
    if shape.kind == "int_or_str":
        return {"x-kubernetes-int-or-string": True}
    if shape.kind == "list":
        return {"type": "array", "items": _shape_schema(shape.inner, free_form)}
    if shape.kind == "map":
        if free_form or shape.inner.kind == "any":
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        values = _shape_schema(shape.inner, False)
        if shape.inner.kind == "str":
            values["maxLength"] = MAP_VALUE_MAX_LENGTH
        return {"type": "object", "additionalProperties": values}
    simple = {"int": {"type": "integer", "format": "int64"}, "float": {"type": "number"},
              "bool": {"type": "boolean"}, "str": {"type": "string"}}
    return dict(simple[shape.kind])


def _add_bounds(prop: dict[str, Any], shape: Shape, meta) -> None:
    if meta.minimum is not None:
        prop["minimum"] = meta.minimum
        if meta.exclusive_minimum:
            prop["exclusiveMinimum"] = True
    if meta.maximum is not None:
        prop["maximum"] = meta.maximum
    if meta.max_items is not None:
        prop["maxItems" if shape.kind == "list" else "maxProperties"] = meta.max_items
    if meta.max_length is not None:
        target = prop["items"] if shape.kind == "list" else prop
        target["maxLength"] = meta.max_length
    if meta.pattern is not None:
        prop["pattern"] = meta.pattern
    if meta.list_map_keys:
        prop["x-kubernetes-list-type"] = "map"
        prop["x-kubernetes-list-map-keys"] = list(meta.list_map_keys)


def spec_schema() -> dict[str, Any]:
    """The job's spec, without defaults but the size's: the operator applies its defaults
    when it reads a job (api/parse.py, as `disttrain validate` does), so a stored spec holds
    what its writers set and nothing more, and a training template's default or enforced
    value is never hidden or contradicted by one the API server filled in. `nodes` keeps
    its default: the scale subresource reads it."""
    spec = schema_for(t.DistributedTrainingSpec)
    _drop_own_defaults(spec, t.DistributedTrainingSpec)
    spec["properties"]["nodes"]["default"] = meta_of(_field("nodes")).default
    spec["x-kubernetes-validations"] = SPEC_RULES + immutability_rules()
    props = spec["properties"]
    props["trainer"]["x-kubernetes-validations"] = TRAINER_RULES
    props["checkpoint"]["x-kubernetes-validations"] = CHECKPOINT_RULES
    props["nprocPerNode"]["x-kubernetes-validations"] = [NPROC_RULE]
    return spec


def crd() -> dict[str, Any]:
    """The complete CustomResourceDefinition object."""
    status = schema_for(DistributedTrainingStatus)
    root = {
        "type": "object",
        "description": "DistributedTraining runs one distributed PyTorch training job: "
                       "torchrun-elastic worker pods with rendezvous wiring, restarts, "
                       "checkpoints and progress.",
        "properties": {
            "apiVersion": {"type": "string", "description": "apiVersion: disttrain.dev/v1alpha1."},
            "kind": {"type": "string", "description": "kind: DistributedTraining."},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status,
        },
        "required": ["spec"],
        "x-kubernetes-validations": ROOT_RULES,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{t.PLURAL}.{t.GROUP}",
                     "labels": {"app.kubernetes.io/name": "disttrain",
                                "app.kubernetes.io/part-of": "disttrain"}},
        "spec": {
            "group": t.GROUP,
            "names": {"kind": t.KIND, "listKind": f"{t.KIND}List", "plural": t.PLURAL,
                      "singular": t.SINGULAR, "shortNames": t.SHORT_NAMES,
                      "categories": ["all", "disttrain"]},
            "scope": "Namespaced",
            "versions": [{
                "name": t.VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": root},
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.nodes",
                              "statusReplicasPath": ".status.workers.active",
                              "labelSelectorPath": ".status.selector"},
                },
                "additionalPrinterColumns": [
                    {"name": c.name, "type": c.type, "jsonPath": c.json_path,
                     **({"description": c.description} if c.description else {}),
                     **({"priority": 1} if c.wide else {})}
                    for c in JOB_COLUMNS],
            }],
        },
    }


def template_part_schema(part: str) -> dict[str, Any]:
    """A template's `defaults` or `enforced`: any part of a job's spec, typed and bounded as
    the job's, without the job's defaults (a template sets only what it says) and without
    what a template cannot hold."""
    from disttrain.api.template_resolution import NOT_IN_TEMPLATES

    spec = schema_for(t.DistributedTrainingSpec)
    for key in NOT_IN_TEMPLATES:
        spec["properties"].pop(key, None)
    _drop_defaults(spec)
    for path in _k8s_paths(t.DistributedTrainingSpec):
        _loosen(spec, path)
    spec["description"] = (f"{part}: a part of a DistributedTraining spec (any field but "
                           f"{' and '.join(NOT_IN_TEMPLATES)}); " +
                           ("a job may set its own." if part == "defaults" else
                            "a job that sets another value is refused."))
    return spec


def _drop_own_defaults(node: dict[str, Any], cls: type) -> None:
    """Our fields' defaults out of a schema; those inside the Kubernetes types stay (the
    keys of their list-maps must have one)."""
    for f, shape in fields_of(cls):
        prop = node["properties"][json_name(f)]
        prop.pop("default", None)
        inner = shape.inner if shape.kind == "list" else shape
        if meta_of(f).k8s is None and inner is not None and inner.kind == "object":
            _drop_own_defaults(prop["items"] if shape.kind == "list" else prop, inner.cls)


def _field(name: str) -> Any:
    return next(f for f, _ in fields_of(t.DistributedTrainingSpec) if json_name(f) == name)


def _k8s_paths(cls: type, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The fields typed by a Kubernetes schema (a pod spec, affinity, tolerations, an env
    var's source), by their JSON path."""
    out = []
    for f, shape in fields_of(cls):
        path = (*prefix, json_name(f))
        inner = shape.inner if shape.kind == "list" else shape
        if meta_of(f).k8s is not None:
            out.append(path)
        elif inner is not None and inner.kind == "object":
            out.extend(_k8s_paths(inner.cls, path))
    return out


def _loosen(spec: dict[str, Any], path: tuple[str, ...]) -> None:
    """A Kubernetes-typed field of a template left untyped in its CRD: typed, each of the
    two parts of both template kinds would carry a pod spec's whole schema (600 KB a CRD).
    The operator checks it in full when a job is resolved against the template, as
    `disttrain validate --template` does."""
    node = spec
    for key in path[:-1]:
        node = node["properties"][key]
        node = node.get("items", node) if node.get("type") == "array" else node
    prop = node["properties"][path[-1]]
    loose: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
    if prop.get("type") == "array":
        prop["items"] = {"type": "object", **loose}
    else:
        node["properties"][path[-1]] = {"type": "object", **loose, "description": prop.get("description", "")}


def _drop_defaults(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("default", None)
        for value in node.values():
            _drop_defaults(value)
    elif isinstance(node, list):
        for value in node:
            _drop_defaults(value)


def template_crd(kind: str) -> dict[str, Any]:
    """The CustomResourceDefinition of TrainingTemplate or ClusterTrainingTemplate."""
    from disttrain.api.template_resolution import CLUSTER_TEMPLATE_KIND, PLURALS

    cluster = kind == CLUSTER_TEMPLATE_KIND
    plural = PLURALS[kind]
    spec = {"type": "object", "description": "spec: what the template sets; a job's defaults < the job < "
                                             "enforced (docs/platform.md).",
            "properties": {
                "description": {"type": "string", "maxLength": 1024, "description": "description: what it is for."},
                "contact": {"type": "string", "maxLength": 1024,
                            "description": "contact: whom a user whose job it refuses should ask."},
                "defaults": template_part_schema("defaults"),
                "enforced": template_part_schema("enforced")}}
    root = {"type": "object",
            "description": (f"{kind}: settings a platform team sets once for many jobs "
                            f"({'every namespace' if cluster else 'one namespace'}): defaults a job may "
                            "change and settings it may not (docs/platform.md)."),
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"type": "object"}, "spec": spec}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{t.GROUP}",
                     "labels": {"app.kubernetes.io/name": "disttrain", "app.kubernetes.io/part-of": "disttrain"}},
        "spec": {
            "group": t.GROUP,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                      "shortNames": ["ctt"] if cluster else ["tt"], "categories": ["disttrain"]},
            "scope": "Cluster" if cluster else "Namespaced",
            "versions": [{"name": t.VERSION, "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": root},
                          "additionalPrinterColumns": [
                              {"name": "Description", "type": "string", "jsonPath": ".spec.description"},
                              {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]}],
        },
    }


def field_paths(cls: type = t.DistributedTrainingSpec, prefix: str = "spec") -> list[str]:
    """Every documented field path (for tests and `kubectl explain` checks)."""
    out = []
    for f, shape in fields_of(cls):
        path = f"{prefix}.{json_name(f)}"
        out.append(path)
        inner = shape.inner if shape.kind == "list" else shape
        if inner is not None and inner.kind == "object":
            out.extend(field_paths(inner.cls, path))
    return out

