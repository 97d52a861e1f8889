"""Worker pods as ordered pure passes, one concern each."""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import asdict
from typing import Callable

from disttrain.api.meta import fields_of, meta_of
from disttrain.api.names import CONTAINER_NAME, INDEX_LABEL, ROLE_LABEL, SHM_MOUNT, TMP_MOUNT, service_name, worker_name
from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.render.context import (TERMINATION_GRACE_SECONDS, TERMINATION_LOG, RenderContext, common_labels,
                                      owner_references)
from disttrain.render.env import apply_env
from disttrain.render.instrument import instrument
from disttrain.render.merge import merge

TEMPLATE_HASH_ANNOTATION = f"{t.GROUP}/template-hash"
UID = 1000


def skeleton(ctx: RenderContext) -> dict:
    job, spec = ctx.job, ctx.spec
    name = worker_name(job.name, ctx.index)
    labels = {**common_labels(job), "app.kubernetes.io/component": "worker",
              ROLE_LABEL: "worker", INDEX_LABEL: str(ctx.index)}
    meta = {"name": name, "namespace": ctx.namespace, "labels": labels,
            "annotations": {TEMPLATE_HASH_ANNOTATION: template_hash(job, ctx.resolved)}}
    owners = owner_references(job)
    if owners:
        meta["ownerReferences"] = owners
    trainer = spec.trainer
    command = (["torchrun", "--module", "disttrain_trainer"] if trainer.builtin is not None
               else ["torchrun", *trainer.command, *(trainer.args or [])])
    container = {"name": CONTAINER_NAME, "image": spec.image,
                 "imagePullPolicy": spec.image_pull_policy, "command": command,
                 # The trainer's final report (the success contract); a user's script that
                 # writes none leaves the tail of its log there when it fails.
                 "terminationMessagePath": TERMINATION_LOG,
                 "terminationMessagePolicy": "FallbackToLogsOnError"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "hostname": name,
        "subdomain": service_name(job.name),
        "restartPolicy": "Never",
        "containers": [container],
    }}


def resources(pod: dict, ctx: RenderContext) -> dict:
    spec = ctx.spec
    # Quantities are strings in the Pod API ("4", "500m"); YAML may give us ints.
    requests = {k: str(v) for k, v in ((spec.resources.requests if spec.resources else None) or {}).items()}
    limits = {k: str(v) for k, v in ((spec.resources.limits if spec.resources else None) or {}).items()}
    if spec.gpus_per_node > 0:
        requests[spec.gpu_resource_name] = str(spec.gpus_per_node)
        limits[spec.gpu_resource_name] = str(spec.gpus_per_node)
    out = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    if out:
        pod["spec"]["containers"][0]["resources"] = out
    return pod


def volumes(pod: dict, ctx: RenderContext) -> dict:
    ckpt = ctx.spec.checkpoint
    pod["spec"]["volumes"] = [
        # NCCL and DataLoader workers share tensors through /dev/shm; the default 64Mi kills them.
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {"name": "tmp", "emptyDir": {}},
    ]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "dshm", "mountPath": SHM_MOUNT},
        {"name": "tmp", "mountPath": TMP_MOUNT},
    ]
    # An object store is reached over the network, and storage none keeps nothing: no volume.
    if ckpt.uri is None and ckpt.storage != "none":
        source = ({"persistentVolumeClaim": {"claimName": ckpt.claim_name}}
                  if ckpt.claim_name else {"emptyDir": {}})
        pod["spec"]["volumes"].insert(0, {"name": "checkpoints", **source})
        pod["spec"]["containers"][0]["volumeMounts"].insert(0, {"name": "checkpoints", "mountPath": ckpt.path})
    return pod


def ports_and_probes(pod: dict, ctx: RenderContext) -> dict:
    spec = ctx.spec
    container = pod["spec"]["containers"][0]
    container["ports"] = [
        {"name": "rendezvous", "containerPort": spec.rendezvous.port, "protocol": "TCP"},
        {"name": "metrics", "containerPort": spec.metrics.port, "protocol": "TCP"},
    ]
    if ctx.builtin is not None:
        # Readiness only: a liveness probe would kill workers stuck in a long collective
        # or checkpoint, which torchrun and the operator already handle.
        # A CPU-bound step can starve the status thread past the default 1 s timeout
        # (seen on the real node: workers training but never Ready, so no progress read).
        container["readinessProbe"] = {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3}
    return pod


def scheduling(pod: dict, ctx: RenderContext) -> dict:
    sched = ctx.spec.scheduling
    if sched is None:
        return pod
    for field, value in (("schedulerName", sched.scheduler_name),
                         ("priorityClassName", sched.priority_class_name),
                         ("nodeSelector", sched.node_selector),
                         ("tolerations", sched.tolerations), ("affinity", sched.affinity)):
        if value:
            pod["spec"][field] = value
    return pod


def security(pod: dict, ctx: RenderContext) -> dict:
    pod_spec = pod["spec"]
    pod_spec["automountServiceAccountToken"] = False
    # Service env links would inject e.g. MASTER_PORT from a Service named "master".
    pod_spec["enableServiceLinks"] = False
    pod_spec["terminationGracePeriodSeconds"] = TERMINATION_GRACE_SECONDS
    pod_spec["securityContext"] = {
        "runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
        "seccompProfile": {"type": "RuntimeDefault"}}
    pod_spec["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]}}
    return pod


def pod_template(pod: dict, ctx: RenderContext) -> dict:
    template = ctx.spec.pod_template
    if template is None:
        return pod
    if template.metadata is not None:
        meta = pod["metadata"]
        meta["labels"] = {**(template.metadata.labels or {}), **meta["labels"]}
        meta["annotations"] = {**(template.metadata.annotations or {}), **meta["annotations"]}
    if template.spec:
        pod["spec"] = merge(pod["spec"], template.spec)
    return pod


def avoided_nodes(pod: dict, ctx: RenderContext) -> dict:
    """Keep the worker off the nodes the job avoids: `metadata.name NotIn [...]` added to
    every required node selector term (terms are ORed, so each must carry it), after the
    user's own affinity has been merged. The template hash does not change: running
    workers stay where they are."""
    if not ctx.avoid_nodes:
        return pod
    away = {"key": "metadata.name", "operator": "NotIn", "values": sorted(set(ctx.avoid_nodes))}
    affinity = copy.deepcopy(pod["spec"].get("affinity") or {})  # never the spec's own dict
    required = affinity.setdefault("nodeAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution",
                                                                   {})
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [{**term, "matchFields": [*(term.get("matchFields") or []), away]}
                                     for term in terms]
    pod["spec"]["affinity"] = affinity
    return pod


def admitted_flavor(pod: dict, ctx: RenderContext) -> dict:
    """A queue admitted the job on flavors of nodes (integrations' `placement`): their node
    labels join the node selector (a flavor's label wins over the spec's: the quota was
    reserved on those nodes) and their tolerations are added, as the queue does for the job
    kinds it knows."""
    spec = pod["spec"]
    if ctx.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **dict(ctx.node_selector)}
    if ctx.tolerations:
        have = list(spec.get("tolerations") or [])
        spec["tolerations"] = have + [dict(tol) for tol in ctx.tolerations if tol not in have]
    return pod


PASSES: tuple[Callable[[dict, RenderContext], dict], ...] = (
    apply_env, resources, volumes, ports_and_probes, scheduling, security, instrument, pod_template, avoided_nodes,
    admitted_flavor)


def render_pod(job: t.Job, resolved: Resolved, index: int, avoid_nodes: tuple[str, ...] = (), *,
               node_selector: dict[str, str] | None = None, tolerations: tuple[dict, ...] = ()) -> dict:
    """Worker `index` of the job; `avoid_nodes` kept away from, the node labels and
    tolerations of an admission (a queue's flavors) added. What an integration adds to each
    worker (its PodGroup) comes on top: integrations/registry.py's render_pod."""
    ctx = RenderContext(job=job, resolved=resolved, index=index, avoid_nodes=avoid_nodes,
                        node_selector=tuple(sorted((node_selector or {}).items())), tolerations=tuple(tolerations))
    pod = skeleton(ctx)
    for step in PASSES:
        pod = step(pod, ctx)
    return pod


# Fields that may change while pods run without recreating them.
_LIVE_FIELDS = frozenset(f.name for f, _ in fields_of(t.DistributedTrainingSpec)
                         if not meta_of(f).immutable_while_running)


# builtin fields added after the hash was fixed, at the values that render no env.
_ADDED_DEFAULTS = {"eval_fraction": 0.1, "eval_fold": 0, "eval_interval_steps": 0}
_ADDED_SCHEDULING = ("gang", "topology")
_ADDED_CHECKPOINT_DEFAULTS = {"uri": None, "secret_ref": None, "endpoint": None, "storage": "auto"}


# Every pass compares its running pods' hash with the spec's, and the spec is the same two
# objects (the validation kept per generation) pass after pass: hashing them anew was half
# of a pass's decisions at 500 jobs. Entries hold their objects, so an id is never reused
# while it is a key; specs are never changed in place (dataclasses.replace makes new ones).
_HASHES: OrderedDict[tuple[int, int], tuple[t.Job, Resolved, str]] = OrderedDict()
_HASHES_KEPT = 4096
_HASHES_LOCK = threading.Lock()


def template_hash(job: t.Job, resolved: Resolved) -> str:
    """Changes exactly when running pods no longer match the spec and must be replaced."""
    key = (id(job), id(resolved))
    with _HASHES_LOCK:  # the CLI's local runs and sweeps render from threads too
        kept = _HASHES.get(key)
        if kept is not None and kept[0] is job and kept[1] is resolved:
            _HASHES.move_to_end(key)
            return kept[2]
    value = _template_hash(job, resolved)
    with _HASHES_LOCK:
        _HASHES[key] = (job, resolved, value)
        if len(_HASHES) > _HASHES_KEPT:
            _HASHES.popitem(last=False)
    return value


def _template_hash(job: t.Job, resolved: Resolved) -> str:
    spec = {k: v for k, v in asdict(job.spec).items() if k not in _LIVE_FIELDS}
    # The name of the template the job was resolved against: no pod reads it, and what the
    # template set is in the spec itself by now.
    spec.pop("template_ref", None)
    for added in ("devices", "compute_domain"):  # added later: unset, they change no hash
        if spec.get(added) is None:
            spec.pop(added, None)
    # The operator's own knob (how long it waits for a checkpoint before a stop): no pod reads it.
    spec["checkpoint"] = {k: v for k, v in spec["checkpoint"].items()
                          if k != "evict_grace_seconds" and (k not in _ADDED_CHECKPOINT_DEFAULTS
                                                             or v != _ADDED_CHECKPOINT_DEFAULTS[k])}
    if spec.get("scheduling"):  # fields added later: unset, they change no hash
        spec["scheduling"] = {k: v for k, v in spec["scheduling"].items()
                              if k not in _ADDED_SCHEDULING or v is not None}
    spec["trainer"] = {k: v for k, v in spec["trainer"].items()  # added later: unset changes no hash
                       if k not in ("instrument", "instrument_image") or v is not None}
    builtin = spec["trainer"].get("builtin")
    if builtin:  # fields added later count only when used: an upgrade replaces no workers
        spec["trainer"]["builtin"] = {k: v for k, v in builtin.items()
                                      if k not in _ADDED_DEFAULTS or v != _ADDED_DEFAULTS[k]}
    topology = {"min": resolved.min_nodes, "max": resolved.max_nodes,
                "nproc": resolved.nproc_per_node, "strategy": resolved.strategy,
                "precision": resolved.precision}
    blob = json.dumps({"spec": spec, "topology": topology}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
