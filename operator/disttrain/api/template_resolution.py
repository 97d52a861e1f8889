"""Training templates: what a platform team sets once for many jobs (pure).

A TrainingTemplate (namespaced) or ClusterTrainingTemplate holds two partial job specs:
`defaults`, which a job may change, and `enforced`, which it may not. A job is resolved
against one in this order, stated here once (RESOLUTION_ORDER):

    the template's defaults  <  the job's own spec  <  the template's enforced settings

How two values of one field combine, by the field's kind (the job's schema says which):
  a scalar                 the later one wins
  a mapping                merged key by key (nodeSelector, resources, labels, a pod spec)
  a list with keys         merged item by item on its keys, as Kubernetes merges it (env
                           and volumes by name, volumeMounts by mountPath, containers by
                           name); a list of named items the schema says nothing of, by name
  any other list           the later one replaces it whole (tolerations, args)
A null sets nothing. An enforced value the job sets otherwise is refused, naming the
template, the field, the template's value and whom to ask (the template's `contact`);
inside a list with keys, only the enforced items' fields are the template's: the job may
add items of its own.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from disttrain.api import types as t
from disttrain.api.conditions import TEMPLATE_NOT_FOUND
from disttrain.api.errors import Absent, FieldError, GuardrailWarning, did_you_mean, unset
from disttrain.api.meta import DNS1123_SUBDOMAIN, matches
from disttrain.api.status_types import TemplateStatus

TEMPLATE_KIND = "TrainingTemplate"
CLUSTER_TEMPLATE_KIND = "ClusterTrainingTemplate"
TEMPLATE_KINDS = (TEMPLATE_KIND, CLUSTER_TEMPLATE_KIND)
RESOLUTION_ORDER = "the template's defaults < the job's own spec < the template's enforced settings"
# Fields a template cannot hold: they control one job's life, not a team's settings.
NOT_IN_TEMPLATES = {"suspend": "suspending a job is its owner's call, job by job",
                    "nodes": "a job's size is its own (kubectl scale changes it; the API server defaults it to 1)",
                    "templateRef": "a template is resolved alone, never through another"}
# A namespace's TrainingTemplate of this name applies to its jobs that name none.
NAMESPACE_DEFAULT = "default"
PLURALS = {TEMPLATE_KIND: "trainingtemplates", CLUSTER_TEMPLATE_KIND: "clustertrainingtemplates"}
NOBODY = "the platform team that owns the template"

DEFAULT, JOB, ENFORCED = "template default", "job", "enforced"


@dataclass(frozen=True)
class Template:
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    description: str = ""
    contact: str = ""  # whom a refused user should ask
    defaults: dict[str, Any] = field(default_factory=dict)
    enforced: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"{self.kind} {self.name}" if self.kind == CLUSTER_TEMPLATE_KIND else \
            f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


@dataclass
class Resolution:
    """A job's document with its spec resolved against a template; `errors` are the
    enforced settings it contradicts; `sources` says where each set field came from
    (path -> DEFAULT, JOB or ENFORCED)."""

    doc: dict[str, Any]
    errors: list[FieldError]
    sources: dict[str, str]


def parse_template(doc: Any) -> tuple[Template | None, list[FieldError]]:
    """A TrainingTemplate or ClusterTrainingTemplate document -> Template. Its defaults
    and enforced settings are checked as partial job specs (types, enums, bounds); what
    they make of a job is checked when a job is resolved against it (check_template)."""
    if not isinstance(doc, dict):
        return None, [FieldError("(document)", doc, "is not a mapping", "a TrainingTemplate object",
                                 f"start the document with apiVersion: {t.API_VERSION}")]
    errors: list[FieldError] = []
    kind, metadata, name = _template_header(doc, errors)
    spec = doc.get("spec") if doc.get("spec") is not None else {}
    if not isinstance(spec, dict):
        errors.append(FieldError("spec", doc.get("spec"), "is not a mapping", "description, contact, defaults, enforced",
                                 "write spec: {defaults: {...}, enforced: {...}}"))
        spec = {}
    allowed = ("description", "contact", "defaults", "enforced")
    for key in spec:
        if key not in allowed:
            errors.append(FieldError(f"spec.{key}", spec[key], "is not a template field", ", ".join(allowed),
                                     did_you_mean(key, list(allowed), "field names") or
                                     "a job's settings go under spec.defaults or spec.enforced"))
    for key in ("description", "contact"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            errors.append(FieldError(f"spec.{key}", spec[key], "must be a string", "text",
                                     f"quote it: {key}: \"...\""))
    parts = {part: _template_part(spec, part, errors) for part in ("defaults", "enforced")}
    if errors:
        return None, errors
    return Template(kind=kind, name=name, namespace=metadata.get("namespace") if kind == TEMPLATE_KIND else None,
                    uid=metadata.get("uid"), generation=metadata.get("generation"),
                    description=spec.get("description") or "", contact=spec.get("contact") or "",
                    defaults=copy.deepcopy(parts["defaults"]), enforced=copy.deepcopy(parts["enforced"])), []


def resolve(template: Template, job_doc: dict[str, Any]) -> Resolution:
    """The job's document with its spec resolved in RESOLUTION_ORDER (the job's own
    document is not changed). Its spec is what its writer set: the CRD defaults nothing but
    `nodes`, which no template holds (api/schema.spec_schema)."""
    own = job_doc.get("spec") if isinstance(job_doc.get("spec"), dict) else {}
    sources: dict[str, str] = {}
    node = _spec_schema()
    _mark(template.defaults, node, "spec", sources, DEFAULT)
    merged = _overlay(copy.deepcopy(template.defaults), own, node, "spec", sources, JOB)
    errors: list[FieldError] = []
    merged = _enforce(merged, own, template.enforced, node, "spec", errors, sources, template)
    return Resolution(doc={**job_doc, "spec": merged}, errors=errors, sources=dict(sorted(sources.items())))


def snapshot(template: Template, now: str) -> TemplateStatus:
    """What a job keeps of the template it was resolved against (status.template)."""
    return TemplateStatus(kind=template.kind, name=template.name, uid=template.uid, generation=template.generation,
                          contact=template.contact or None, defaults=copy.deepcopy(template.defaults) or None,
                          enforced=copy.deepcopy(template.enforced) or None, resolve_time=now)


def from_snapshot(kept: TemplateStatus, namespace: str | None) -> Template:
    return Template(kind=kept.kind or CLUSTER_TEMPLATE_KIND, name=kept.name or "", uid=kept.uid,
                    generation=kept.generation, namespace=namespace if kept.kind == TEMPLATE_KIND else None,
                    contact=kept.contact or "", defaults=copy.deepcopy(kept.defaults or {}),
                    enforced=copy.deepcopy(kept.enforced or {}))


def choose(ref: Any, namespace: str, kept: TemplateStatus | None,
           live: Callable[[str, str | None, str], Template | None]) -> tuple[Template | None, FieldError | None]:
    """The template a job is resolved against, and whether it is new to it: the one it
    kept (status.template) while its templateRef still names it; else the live one its
    templateRef names (`live(kind, namespace, name)`), or without a templateRef its
    namespace's TrainingTemplate `default` if there is one. A templateRef naming no
    template is Absent: the job waits for it."""
    if isinstance(ref, dict) and ref.get("name"):
        kind, name = ref.get("kind") or CLUSTER_TEMPLATE_KIND, ref["name"]
    else:
        kind, name = TEMPLATE_KIND, NAMESPACE_DEFAULT
    if kept is not None and (kept.kind, kept.name) == (kind, name):
        return from_snapshot(kept, namespace), None
    found = live(kind, namespace if kind == TEMPLATE_KIND else None, name)
    if found is None and isinstance(ref, dict) and ref.get("name"):
        where = f" in namespace {namespace}" if kind == TEMPLATE_KIND else ""
        return None, Absent("spec.templateRef.name", name, f"names no {kind}{where}",
                            f"an existing template: kubectl get {PLURALS[kind]}",
                            "fix the name, or ask your platform team for the template; the job starts "
                            "once it exists", reason=TEMPLATE_NOT_FOUND)
    return found, None


def check_template(template: Template) -> list[FieldError]:
    """What the template makes of a job that sets nothing, checked as a job is (the same
    validation and pod policy: a template grants nothing a job could not have)."""
    from disttrain.api.validate import validate_document

    job = {"apiVersion": t.API_VERSION, "kind": t.KIND, "metadata": {"name": "template-check"}}
    resolution = resolve(template, job)
    validation = validate_document(resolution.doc)
    return [*resolution.errors, *validation.errors]


# ---- merging, by the job schema's kind of each field --------------------------------------

MISSING = object()


@cache
def _spec_schema() -> dict[str, Any]:
    """The job spec's schema: it says which lists merge on which keys. Read, never changed."""
    from disttrain.api.schema import spec_schema

    return spec_schema()


def _node(schema: dict[str, Any] | None, key: str | None = None, item: bool = False) -> dict[str, Any] | None:
    if not isinstance(schema, dict):
        return None
    if item:
        return schema.get("items") if isinstance(schema.get("items"), dict) else None
    props = schema.get("properties") or {}
    if key in props:
        return props[key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _list_keys(schema: dict[str, Any] | None, items: list) -> tuple[str, ...]:
    """The keys a list merges on: its schema's list-map keys; for a list the schema says
    nothing of, `name` when every item has one; else none (the list is one value)."""
    if schema is not None and schema.get("x-kubernetes-list-type") == "map":
        return tuple(schema.get("x-kubernetes-list-map-keys") or ())
    if schema is not None and schema.get("x-kubernetes-list-type") in ("atomic", "set"):
        return ()
    if items and all(isinstance(x, dict) and "name" in x for x in items):
        return ("name",)
    return ()


# Lists whose items merge field by field (a container's env, mounts, resources); an item
# of any other keyed list is one value (an env var, a volume, a mount: each holds one of
# several sources, which must not mix), replaced whole by a later one.
DEEP_ITEMS = frozenset({"containers", "initContainers"})


def _key_of(item: Any, keys: tuple[str, ...]) -> tuple:
    if not isinstance(item, dict):
        return (json.dumps(item, sort_keys=True),)
    return tuple(json.dumps(item.get(k), sort_keys=True) for k in keys)


def _label(item: Any, keys: tuple[str, ...]) -> str:
    if not isinstance(item, dict):
        return json.dumps(item, sort_keys=True)
    return ",".join(str(item.get(k)) for k in keys if item.get(k) is not None)


def _deep(path: str) -> bool:
    return path.rsplit(".", 1)[-1] in DEEP_ITEMS


def _forget(sources: dict[str, str], path: str) -> None:
    for known in [p for p in sources if p == path or p.startswith(path + ".") or p.startswith(path + "[")]:
        del sources[known]


def _mark(value: Any, node: dict[str, Any] | None, path: str, sources: dict[str, str], who: str,
          keys: tuple[str, ...] = ()) -> None:
    """Record `who` for every field `value` sets below `path` (`keys`: those that name a
    list's item, already in its path)."""
    if isinstance(value, dict) and (node is None or node.get("type") == "object"):
        for key, inner in value.items():
            if inner is not None and key not in keys:
                _mark(inner, _node(node, key), f"{path}.{key}", sources, who)
        return
    if isinstance(value, list):
        keys = _list_keys(node, value)
        if keys:
            for item in value:
                _mark(item, _node(node, item=True), f"{path}[{_label(item, keys)}]", sources, who, keys)
            return
    _forget(sources, path)  # a value set whole replaces what was set inside it
    sources[path] = who


def _overlay(base: Any, top: Any, node: dict[str, Any] | None, path: str, sources: dict[str, str], who: str,
             keys: tuple[str, ...] = ()) -> Any:
    """`top` over `base` (the job's spec over the template's defaults); `keys`: those
    that name the list item these are, already in `path`."""
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for key, value in top.items():
            if value is None or key in keys:
                continue
            child = _node(node, key)
            if key in out:
                out[key] = _overlay(out[key], value, child, f"{path}.{key}", sources, who)
            else:
                out[key] = copy.deepcopy(value)
                _mark(value, child, f"{path}.{key}", sources, who)
        return out
    if isinstance(base, list) and isinstance(top, list):
        keys = _list_keys(node, [*base, *top])
        if keys:
            out = list(base)
            where = {_key_of(item, keys): i for i, item in enumerate(out)}
            item_node = _node(node, item=True)
            for item in top:
                at = where.get(_key_of(item, keys))
                item_path = f"{path}[{_label(item, keys)}]"
                if at is not None and _deep(path):
                    out[at] = _overlay(out[at], item, item_node, item_path, sources, who, keys)
                    continue
                if at is None:
                    where[_key_of(item, keys)] = at = len(out)
                    out.append(None)
                _forget(sources, item_path)
                out[at] = copy.deepcopy(item)
                _mark(item, item_node, item_path, sources, who, keys)
            return out
    _mark(top, node, path, sources, who)
    return copy.deepcopy(top)


def _enforce_keyed(merged: Any, own: Any, enforced: list[Any], node: dict[str, Any] | None, path: str,
                   errors: list[FieldError], sources: dict[str, str], template: Template, keys: tuple[str, ...]) -> Any:
    """An enforced list with list-map keys over `merged`: deep inside a pod spec (containers)
    item by item, field by field; elsewhere each enforced item is one value the job may add
    others beside, not change."""
    if own is not MISSING and own is not None and not isinstance(own, list):
        errors.append(refusal(template, path, own, enforced))  # not even a list
    out = list(merged) if isinstance(merged, list) else []
    mine = {_key_of(item, keys): item for item in own} if isinstance(own, list) else {}
    deep, item_node = _deep(path), _node(node, item=True)
    for item in enforced:
        key, item_path = _key_of(item, keys), f"{path}[{_label(item, keys)}]"
        at = next((i for i, x in enumerate(out) if _key_of(x, keys) == key), None)
        if deep:
            resolved = _enforce(out[at] if at is not None else MISSING, mine.get(key, MISSING), item, item_node,
                                item_path, errors, sources, template, keys)
        else:
            if key in mine and mine[key] != item:
                errors.append(refusal(template, item_path, mine[key], item))
            resolved = copy.deepcopy(item)
        if at is None:
            out.append(resolved)
        else:
            out[at] = resolved
        if not deep:
            _forget(sources, item_path)
            _mark(item, item_node, item_path, sources, ENFORCED, keys)
    return out


def _template_header(doc: dict[str, Any], errors: list[FieldError]) -> tuple[Any, dict[str, Any], Any]:
    """A template's apiVersion, kind and name checked: (kind, metadata, name)."""
    if doc.get("apiVersion") != t.API_VERSION:
        errors.append(FieldError("apiVersion", doc.get("apiVersion", unset()), "is not ours", t.API_VERSION,
                                 f"set apiVersion: {t.API_VERSION}"))
    kind = doc.get("kind")
    if kind not in TEMPLATE_KINDS:
        errors.append(FieldError("kind", kind if kind is not None else unset(), "is not a template kind",
                                 " or ".join(TEMPLATE_KINDS), f"set kind: {CLUSTER_TEMPLATE_KIND} (or "
                                 f"{TEMPLATE_KIND} for one namespace)"))
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    name = metadata.get("name")
    if not (isinstance(name, str) and len(name) <= 253 and matches(DNS1123_SUBDOMAIN, name)):
        errors.append(FieldError("metadata.name", name if name is not None else unset(), "is not a valid name",
                                 "a DNS subdomain (lowercase letters, digits, '-' and '.')",
                                 "set metadata.name: e.g. gpu-8x"))
    return kind, metadata, name


def _template_part(spec: dict[str, Any], part: str, errors: list[FieldError]) -> dict[str, Any]:
    """spec.defaults or spec.enforced checked as a partial job spec ({} when unusable)."""
    from disttrain.api.parse import parse_object

    raw = spec.get(part) if spec.get(part) is not None else {}
    if not isinstance(raw, dict):
        errors.append(FieldError(f"spec.{part}", raw, "is not a mapping", "a partial DistributedTraining spec",
                                 f"write spec.{part}: {{image: ..., gpusPerNode: ...}}"))
        raw = {}
    for key, why in NOT_IN_TEMPLATES.items():
        if raw.get(key) is not None:
            errors.append(FieldError(f"spec.{part}.{key}", raw[key], "cannot be in a template", why,
                                     f"remove spec.{part}.{key}"))
    _, part_errors = parse_object(t.DistributedTrainingSpec, raw, f"spec.{part}")
    errors += part_errors
    return raw


def _enforce(merged: Any, own: Any, enforced: Any, node: dict[str, Any] | None, path: str, errors: list[FieldError],
             sources: dict[str, str], template: Template, keys: tuple[str, ...] = ()) -> Any:
    """`enforced` over `merged`, refusing where the job's `own` value says otherwise."""
    if isinstance(enforced, dict) and (node is None or node.get("type") == "object" or isinstance(merged, dict)):
        if own is not MISSING and own is not None and not isinstance(own, dict):
            errors.append(refusal(template, path, own, enforced))  # not even a mapping
        out = dict(merged) if isinstance(merged, dict) else {}
        mine = own if isinstance(own, dict) else {}
        for key, value in enforced.items():
            if value is None:
                continue
            if key in keys:  # named in the path already
                out[key] = copy.deepcopy(value)
                continue
            out[key] = _enforce(out.get(key, MISSING), mine.get(key, MISSING), value, _node(node, key),
                                f"{path}.{key}", errors, sources, template)
        return out
    if isinstance(enforced, list):
        keys = _list_keys(node, [*enforced, *(own if isinstance(own, list) else [])])
        if keys:
            return _enforce_keyed(merged, own, enforced, node, path, errors, sources, template, keys)
    if own is not MISSING and own is not None and own != enforced:
        errors.append(refusal(template, path, own, enforced))
    _mark(enforced, node, path, sources, ENFORCED)
    return copy.deepcopy(enforced)


def refusal(template: Template, path: str, value: Any, enforced: Any) -> FieldError:
    """A job's setting that contradicts an enforced one."""
    contact = template.contact or NOBODY
    return FieldError(path, value, f"is enforced by {template.title}",
                      f"{json.dumps(enforced)} (the template's value)",
                      f"leave {path} out of the job (the template sets it), or ask {contact} to change the template")


def without_template(doc: dict[str, Any], warnings: list[GuardrailWarning]) -> list[GuardrailWarning]:
    """The warnings of a job checked offline without the template its templateRef names:
    its values are unknown here, so a warning about a field the file does not set (a value
    only our defaults supplied, which the template may set otherwise) is left out, and a
    first warning says so. A job that names no template: the warnings as they are."""
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    ref = spec.get("templateRef")
    if not isinstance(ref, dict) or not ref.get("name"):
        return warnings
    kept = [w for w in warnings if _sets(doc, w.path)]
    left = len(warnings) - len(kept)
    out = f" ({left} warning{'s' * (left != 1)} about a value the template may set left out)" if left else ""
    return [GuardrailWarning("TemplateNotResolved", "spec.templateRef",
                             f"names {ref.get('kind') or CLUSTER_TEMPLATE_KIND} {ref['name']}, whose values are "
                             f"unknown offline: warned only about what this file sets{out}. Fix: pass "
                             "--template FILE to check what the operator will run"), *kept]


def _sets(doc: Any, path: str) -> bool:
    """Does the document set the field at `path` (`spec.env[0].name`)?"""
    node = doc
    for name, *indexes in (part.split("[") for part in path.split(".")):
        node = node.get(name) if isinstance(node, dict) else None
        for index in indexes:
            index = index.rstrip("]")
            node = node[int(index)] if isinstance(node, list) and index.isdigit() and int(index) < len(node) else None
        if node is None:
            return False
    return True
