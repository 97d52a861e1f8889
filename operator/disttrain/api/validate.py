"""The offline validator: parse -> defaults -> semantic checks -> resolve.

`validate_document` never raises; it returns every error and warning. The CLI and the
operator both call it, so `disttrain validate` prints what the operator would say.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.api.bounds import check_document_bounds
from disttrain.api.defaults import Images, apply_defaults, resolve, settle_trainer, with_image
from disttrain.api.errors import FieldError, GuardrailWarning, InvalidSpec, unset
from disttrain.api.names import CONTAINER_NAME, SHM_MOUNT, SYSTEM_DIRECTORIES, TMP_MOUNT
from disttrain.api.parse import parse_job
from disttrain.api.pod_contract import MODEL_DATASETS, PREFIX
from disttrain.api.policy import PodPolicy, check_pod_policy
from disttrain.api.quantity import parse_quantity

RESERVED_ENV_PREFIXES = ("PET_", PREFIX, "TORCHELASTIC_")
RESERVED_ENV_NAMES = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
})
RESERVED_LABEL_PREFIXES = (f"{t.GROUP}/", "app.kubernetes.io/")
# Pod spec fields that render owns; a podTemplate may not override them.
OWNED_POD_FIELDS = ("restartPolicy", "hostname", "subdomain", "automountServiceAccountToken")


@dataclass(slots=True)
class Validation:
    """Everything validation learnt about one document."""

    job: t.Job | None
    resolved: Resolved | None
    errors: list[FieldError] = field(default_factory=list)
    warnings: list[GuardrailWarning] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def validate_document(doc: Any, policy: PodPolicy = PodPolicy(), images: Images = Images()) -> Validation:
    """`policy`: what podTemplate may do beyond the sandbox (the operator's setting; the
    default refuses, as the operator does unless its platform allows more). `images`: what a
    job that names no image runs (the operator's trainer image, or the job's own from before)."""
    errors = check_document_bounds(doc)
    if errors:  # nothing else may walk a value this large or deep
        return Validation(None, None, errors)
    job, errors = parse_job(doc)
    if errors:
        return Validation(None, None, errors)
    job = with_image(apply_defaults(job), images)
    job, trainer_warnings, errors = settle_trainer(job)
    errors += check_spec(job.spec)
    if job.spec.pod_template is not None:
        template = job.spec.pod_template
        errors += check_pod_policy(template.spec, job.namespace, policy,
                                   template.metadata.annotations if template.metadata else None)
    resolved, warnings, topology_errors = resolve(job.spec, images)
    errors += topology_errors
    return Validation(job, None if errors else resolved, errors, trainer_warnings + warnings)


def load_job(doc: Any, policy: PodPolicy = PodPolicy(), images: Images = Images()
             ) -> tuple[t.Job, Resolved, list[GuardrailWarning]]:
    """validate_document for callers that want the job or an InvalidSpec exception."""
    result = validate_document(doc, policy, images)
    if not result.ok:
        raise InvalidSpec(result.errors)
    return result.job, result.resolved, result.warnings


def check_spec(spec: t.DistributedTrainingSpec) -> list[FieldError]:
    """Semantic checks the schema cannot express (or that the offline path must repeat)."""
    return [*check_node_range(spec), *check_trainer(spec.trainer), *check_env(spec.env or [], "spec.env"),
            *check_instrument_env(spec),
            *check_resources(spec), *check_ports(spec), *check_checkpoint_path(spec),
            *check_pod_template(spec.pod_template), *check_topology(spec), *check_devices(spec)]


def check_devices(spec: t.DistributedTrainingSpec) -> list[FieldError]:
    """GPUs are asked for one way: DRA devices or the extended-resource count."""
    if spec.devices is None or not spec.gpus_per_node:
        return []
    return [FieldError("spec.gpusPerNode", spec.gpus_per_node, "is set beside spec.devices, which gives each worker "
                       f"{spec.devices.count} devices of {spec.devices.class_name}",
                       "one of gpusPerNode (a device plugin's count) or devices (DRA)",
                       "remove spec.gpusPerNode (devices.count sets the processes per worker), or spec.devices")]


def check_topology(spec: t.DistributedTrainingSpec) -> list[FieldError]:
    """One level for the whole job (required or preferred) and slices that divide every
    size the job may run at: Kueue places whole slices only."""
    topo = spec.scheduling.topology if spec.scheduling is not None else None
    if topo is None:
        return []
    path = "spec.scheduling.topology"
    if topo.required and topo.preferred:
        return [FieldError(f"{path}.preferred", topo.preferred, f"is set beside required ({topo.required})",
                           "one of required or preferred", f"remove {path}.preferred or {path}.required")]
    if not (topo.required or topo.preferred or topo.slice_required):
        return [FieldError(f"{path}.required", unset(), "is not set, and the topology asks nothing without a level",
                           "required, preferred or sliceRequired: a node label of the Kueue Topology",
                           f"set {path}.required (e.g. example.com/rack), or remove {path}")]
    if bool(topo.slice_required) != bool(topo.slice_size):
        given, missing = ("sliceRequired", "sliceSize") if topo.slice_required else ("sliceSize", "sliceRequired")
        return [FieldError(f"{path}.{missing}", unset(), f"is not set, and {given} needs it",
                           "sliceRequired and sliceSize together", f"set {path}.{missing}, or remove {path}.{given}")]
    size = topo.slice_size
    if not size:
        return []
    sizes = {"nodes": spec.nodes, "minNodes": spec.min_nodes, "maxNodes": spec.max_nodes}
    return [FieldError(f"spec.{name}", value, f"is not a multiple of scheduling.topology.sliceSize ({size}): "
                       "Kueue places whole slices only", f"a multiple of {size}",
                       f"make spec.{name} a multiple of {size}, or change sliceSize")
            for name, value in sizes.items() if isinstance(value, int) and value % size]


def check_node_range(spec: t.DistributedTrainingSpec) -> list[FieldError]:
    """The CEL rules on nodes, repeated offline (api/schema.py SPEC_RULES)."""
    nodes, low, high = spec.nodes, spec.min_nodes, spec.max_nodes
    errors = []
    if low is not None and low > nodes:
        errors.append(FieldError("spec.minNodes", low, f"is more than nodes ({nodes})",
                                 "minNodes <= nodes <= maxNodes", "lower spec.minNodes or raise spec.nodes"))
    if high is not None and nodes > high:
        errors.append(FieldError("spec.nodes", nodes, f"is more than maxNodes ({high})",
                                 "minNodes <= nodes <= maxNodes", "raise spec.maxNodes or lower spec.nodes"))
    return errors


def check_trainer(trainer: t.TrainerSpec) -> list[FieldError]:
    errors = []
    if (trainer.builtin is None) == (trainer.command is None):
        errors.append(FieldError("spec.trainer", _present(trainer), "needs exactly one of builtin or command",
                                 "builtin: {...} or command: [...]",
                                 "keep builtin for the shipped trainer or command for your script"))
    if trainer.args is not None and trainer.command is None:
        errors.append(FieldError("spec.trainer.args", trainer.args, "is only used with command", "",
                                 "set trainer.command or remove args"))
    if trainer.instrument == "auto" and trainer.command is None:
        errors.append(FieldError("spec.trainer.instrument", trainer.instrument, "is for your own command",
                                 "none with builtin (the built-in trainer reports on its own)", "remove instrument"))
    if trainer.instrument_image is not None and trainer.instrument != "auto":
        errors.append(FieldError("spec.trainer.instrumentImage", trainer.instrument_image,
                                 "is only used with instrument: auto", "", "set instrument: auto or remove it"))
    if trainer.command is not None:
        if not trainer.command:
            errors.append(FieldError("spec.trainer.command", [], "is empty", "a script path or --module NAME",
                                     "e.g. command: [\"/workspace/train.py\"]"))
    builtin = trainer.builtin
    if builtin is not None:
        fit = MODEL_DATASETS[builtin.model]
        if builtin.dataset not in fit:
            errors.append(FieldError("spec.trainer.builtin.dataset", builtin.dataset,
                                     f"does not fit model {builtin.model}", " or ".join(fit),
                                     f"set dataset to {fit[0]} or remove it"))
        folds = int(1 / builtin.eval_fraction + 1e-9) if builtin.eval_fraction else 1
        if builtin.eval_fold >= folds:
            errors.append(FieldError("spec.trainer.builtin.evalFold", builtin.eval_fold,
                                     f"is past the last block of evalFraction {builtin.eval_fraction}",
                                     f"0..{folds - 1}", "lower evalFold or evalFraction (k-fold: 1/k and 0..k-1)"))
    return errors


def check_instrument_env(spec: t.DistributedTrainingSpec) -> list[FieldError]:
    """instrument: auto puts its start-up folder first on PYTHONPATH, before the job's own:
    it must read that one as a value."""
    if spec.trainer.instrument != "auto":
        return []
    return [FieldError(f"spec.env[{i}].valueFrom", "PYTHONPATH", "cannot be combined with instrument: auto",
                       "PYTHONPATH given as value", "give PYTHONPATH as value: (instrument: auto puts its own "
                       "folder in front of it)")
            for i, var in enumerate(spec.env or []) if var.name == "PYTHONPATH" and var.value_from is not None]


def _present(trainer: t.TrainerSpec) -> dict:
    return {k: "..." for k in ("builtin", "command") if getattr(trainer, k) is not None}


def check_env(env: list, path: str) -> list[FieldError]:
    errors = []
    for i, var in enumerate(env):
        name = var.name if isinstance(var, t.EnvVar) else var.get("name")
        value, value_from = ((var.value, var.value_from) if isinstance(var, t.EnvVar)
                             else (var.get("value"), var.get("valueFrom")))
        if is_reserved_env(name):
            errors.append(FieldError(f"{path}[{i}].name", name, "is reserved: disttrain sets it for torchrun and the trainer",
                                     "any name except PET_*, DISTTRAIN_*, TORCHELASTIC_*, "
                                     + ", ".join(sorted(RESERVED_ENV_NAMES)),
                                     "use the matching spec field (nodes, nprocPerNode, rendezvous, ...) instead"))
        if value is not None and value_from is not None:
            errors.append(FieldError(f"{path}[{i}]", name, "sets both value and valueFrom", "one of them",
                                     "remove one"))
    return errors


def is_reserved_env(name: Any) -> bool:
    return isinstance(name, str) and (name.startswith(RESERVED_ENV_PREFIXES) or name in RESERVED_ENV_NAMES)


def check_resources(spec: t.DistributedTrainingSpec) -> list[FieldError]:
    res = spec.resources
    if res is None:
        return []
    errors, parsed = [], {}
    for kind in ("requests", "limits"):
        for name, value in (getattr(res, kind) or {}).items():
            path = f"spec.resources.{kind}.{name}"
            if name == spec.gpu_resource_name or name.endswith("/gpu"):
                errors.append(FieldError(path, value, "sets GPUs in resources", "cpu, memory, ephemeral-storage, ...",
                                         f"remove it and set spec.gpusPerNode: {value}"))
                continue
            quantity = parse_quantity(value)
            if quantity is None or quantity < 0:
                errors.append(FieldError(path, value, "is not a Kubernetes quantity",
                                         "e.g. 8, 500m, 64Gi", "write a number with an optional unit"))
                continue
            parsed[(kind, name)] = quantity
    for (kind, name), request in parsed.items():
        limit = parsed.get(("limits", name))
        if kind == "requests" and limit is not None and request > limit:
            errors.append(FieldError(f"spec.resources.requests.{name}", res.requests[name],
                                     f"is more than the limit {res.limits[name]!r}", "requests <= limits",
                                     "raise the limit or lower the request"))
    return errors


def check_ports(spec: t.DistributedTrainingSpec) -> list[FieldError]:
    if spec.rendezvous.port == spec.metrics.port:
        return [FieldError("spec.metrics.port", spec.metrics.port, "is also the rendezvous port",
                           "a port other than spec.rendezvous.port", "choose another port")]
    return []


def check_checkpoint_path(spec: t.DistributedTrainingSpec) -> list[FieldError]:
    """The checkpoint volume's mountPath may not collide with the pod's own mounts."""
    path, field_path = spec.checkpoint.path, "spec.checkpoint.path"
    normal = posixpath.normpath(path)
    if normal.startswith("//"):
        normal = "/" + normal.lstrip("/")
    if normal != path:  # normpath resolves every '..', so a path holding one always differs
        return [FieldError(field_path, path, "is not a plain absolute path",
                           "an absolute path without '.', '..', '//' or a trailing '/'",
                           f"write {normal!r}" if ".." not in path.split("/") else
                           "write the directory without '..'")]
    fix = "use a directory of its own, e.g. /checkpoints"
    if normal == "/":
        return [FieldError(field_path, path, "is the root directory", "a directory below /", fix)]
    owned = [(SHM_MOUNT, "the pod's memory-backed /dev/shm mount"), (TMP_MOUNT, "the pod's /tmp mount")]
    for mount, what in owned:
        # Below /dev/shm a checkpoint would live in memory; below /tmp is a mount of its own.
        if _within(mount, normal) or (mount == SHM_MOUNT and _within(normal, mount)):
            return [FieldError(field_path, path, f"is or contains {what}",
                               f"a directory other than {SHM_MOUNT}, {TMP_MOUNT} and their parents", fix)]
    for system in SYSTEM_DIRECTORIES:
        if _within(system, normal) or _within(normal, system):
            return [FieldError(field_path, path, f"collides with {system}, which the container "
                               "runtime mounts", f"a directory outside {', '.join(SYSTEM_DIRECTORIES)}", fix)]
    for i, mount_path in _trainer_mount_paths(spec.pod_template):
        if isinstance(mount_path, str) and posixpath.normpath(mount_path) == normal:
            return [FieldError(field_path, path, f"is also the mountPath of "
                               f"spec.podTemplate.spec.containers[{i}].volumeMounts", "a directory no "
                               "other volume is mounted at", fix + ", or drop that volumeMount")]
    return []


def _within(inner: str, outer: str) -> bool:
    """Is `inner` the directory `outer` or below it? Both are normalised and neither is "/"."""
    return inner == outer or inner.startswith(outer + "/")


def _trainer_mount_paths(template: t.PodTemplate | None) -> list[tuple[int, Any]]:
    containers = ((template.spec or {}).get("containers") if template else None) or []
    out = []
    for i, container in enumerate(containers if isinstance(containers, list) else []):
        if isinstance(container, dict) and container.get("name") == CONTAINER_NAME:
            mounts = container.get("volumeMounts")
            out += [(i, m.get("mountPath")) for m in (mounts if isinstance(mounts, list) else [])
                    if isinstance(m, dict)]
    return out


def check_pod_template(template: t.PodTemplate | None) -> list[FieldError]:
    if template is None:
        return []
    errors = []
    labels = (template.metadata.labels if template.metadata else None) or {}
    for key in labels:
        if key.startswith(RESERVED_LABEL_PREFIXES):
            errors.append(FieldError(f"spec.podTemplate.metadata.labels.{key}", labels[key],
                                     "uses a reserved prefix", "labels outside disttrain.dev/ and app.kubernetes.io/",
                                     "rename the label"))
    pod = template.spec or {}
    for owned in OWNED_POD_FIELDS:
        if owned in pod:
            errors.append(FieldError(f"spec.podTemplate.spec.{owned}", pod[owned],
                                     "is set by disttrain", "fields disttrain does not own",
                                     "remove it (see docs/api.md, podTemplate)"))
    # A list, or null (no setting): parse checked the template against the pod schema.
    for i, container in enumerate(pod.get("containers") or []):
        path = f"spec.podTemplate.spec.containers[{i}]"
        if not isinstance(container, dict) or not isinstance(container.get("name"), str):
            errors.append(FieldError(path, container, "needs a name", "a container with name", "add name:"))
            continue
        if container["name"] == CONTAINER_NAME:
            for owned in ("command", "args", "image"):
                if owned in container:
                    field_name = {"image": "spec.image"}.get(owned, f"spec.trainer.{owned}")
                    errors.append(FieldError(f"{path}.{owned}", container[owned], "is set by disttrain",
                                             hint=f"use {field_name}"))
            errors += check_env(container.get("env") or [], f"{path}.env")  # a list or null (schema-checked)
            context = container.get("securityContext")
            if isinstance(context, dict) and context.get("privileged") is True \
                    and context.get("allowPrivilegeEscalation") is not True:
                errors.append(FieldError(f"{path}.securityContext.privileged", True, "needs "
                                         "allowPrivilegeEscalation: true, which disttrain sets to false",
                                         "privileged with allowPrivilegeEscalation: true",
                                         f"also set {path}.securityContext.allowPrivilegeEscalation: true"))
    return errors
