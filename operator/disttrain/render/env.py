"""Environment passes: torchrun's PET_* and the trainer's DISTTRAIN_* (docs/pod-contract.md)."""

from __future__ import annotations

from disttrain.api import types as t
from disttrain.api.names import CREDENTIAL_ENV, ENDPOINT_ENV, OPTIONAL_CREDENTIAL_ENV, service_name, worker_name
from disttrain.api import pod_contract as pc
from disttrain.render.context import SHUTDOWN_TIMEOUT_SECONDS, TERMINATION_LOG, RenderContext


def rendezvous_endpoint(ctx: RenderContext) -> str:
    job = ctx.job
    host = f"{worker_name(job.name, 0)}.{service_name(job.name)}.{ctx.namespace}.svc"
    return f"{host}:{ctx.spec.rendezvous.port}"


def torchrun_env(ctx: RenderContext) -> list[dict]:
    spec, res = ctx.spec, ctx.resolved
    rdzv = spec.rendezvous
    conf = (f"join_timeout={rdzv.join_timeout_seconds},"
            f"last_call_timeout={rdzv.last_call_timeout_seconds},"
            f"is_host={'true' if ctx.index == 0 else 'false'}")
    return _pairs({
        "PET_NNODES": f"{res.min_nodes}:{res.max_nodes}",
        "PET_NPROC_PER_NODE": res.nproc_per_node,
        "PET_RDZV_BACKEND": rdzv.backend,
        "PET_RDZV_ENDPOINT": rendezvous_endpoint(ctx),
        "PET_RDZV_ID": ctx.job.uid or ctx.job.name,
        "PET_MAX_RESTARTS": spec.max_restarts,
        "PET_RDZV_CONF": conf,
        "PET_MONITOR_INTERVAL": 1,
        # torch 2.15 deadlocks a node joining a running job when agents share the
        # rendezvous store with the workers (docs/trainer.md, "losing the rendezvous host").
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": 1,
        "PET_SHUTDOWN_TIMEOUT": SHUTDOWN_TIMEOUT_SECONDS,
    })


def trainer_env(ctx: RenderContext) -> list[dict]:
    spec, res, job = ctx.spec, ctx.resolved, ctx.job
    ckpt = spec.checkpoint
    values = {
        pc.JOB_NAME.env: job.name,
        pc.NAMESPACE.env: ctx.namespace,
        pc.STRATEGY.env: res.strategy,
        pc.MESH_FSDP.env: spec.mesh.fsdp if spec.mesh else 0,
        pc.MESH_TP.env: spec.mesh.tp if spec.mesh else 0,
        pc.PRECISION.env: res.precision,
        pc.ACCUMULATE_GRAD_BATCHES.env: spec.accumulate_grad_batches,
        pc.GPUS_PER_NODE.env: spec.gpus,
    }
    if ctx.builtin is not None:
        b = ctx.builtin
        # The pod contract's order, DISTTRAIN_DATASET after the model (its default depends
        # on the model, so the API resolves it); a setting not `always` only away from its
        # default (pod_contract.Setting).
        for field, setting in pc.BUILTIN.items():
            value = getattr(b, field)
            if setting.always or value != setting.default:
                values[setting.env] = value
            if setting is pc.MODEL:
                values[pc.DATASET.env] = b.dataset
    if ckpt.storage != "none":
        values |= {
            # An object-store URL or the volume's mount: the trainer (storage.open_storage)
            # and a user's script read the one variable either way.
            pc.CHECKPOINT_DIR.env: ckpt.uri or ckpt.path,
            pc.CHECKPOINT_INTERVAL_STEPS.env: ckpt.interval_steps,
            pc.CHECKPOINT_KEEP.env: ckpt.keep,
            pc.CHECKPOINT_ASYNC.env: "true" if ckpt.async_ else "false",
        }
    values |= {
        pc.METRICS_PORT.env: spec.metrics.port,
        pc.TERMINATION_LOG.env: TERMINATION_LOG,  # the container's terminationMessagePath
    }
    pod_name = {"name": pc.POD_NAME.env,
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    # The bearer token of POST /checkpoint (checkpoint-then-evict): the pod's own UID,
    # which the operator reads from the pod it watches; nothing that cannot read the pod
    # can guess it, and whoever can read the pod can delete it anyway.
    token = {"name": pc.CONTROL_TOKEN.env, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
    return [*_pairs(values), pod_name, token, *object_store_env(ckpt)]


def object_store_env(ckpt: t.Checkpoint) -> list[dict]:
    """The object store's credentials, by reference to the job's Secret (the operator never
    reads them, and they appear in no status, event or log), and its endpoint."""
    if ckpt.uri is None:
        return []
    out = []
    if ckpt.secret_ref is not None:
        for key in CREDENTIAL_ENV:
            ref = {"name": ckpt.secret_ref.name, "key": key}
            if key in OPTIONAL_CREDENTIAL_ENV:
                ref["optional"] = True
            out.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
    if ckpt.endpoint is not None:
        out.append({"name": ENDPOINT_ENV, "value": ckpt.endpoint})
    return out


def user_env(ctx: RenderContext) -> list[dict]:
    out = []
    for var in ctx.spec.env or []:
        entry = {"name": var.name}
        if var.value is not None:
            entry["value"] = var.value
        if var.value_from is not None:
            entry["valueFrom"] = var.value_from
        out.append(entry)
    # The root filesystem is read-only: caches (torch, triton, HF) need a writable HOME.
    if not any(v["name"] == "HOME" for v in out):
        out.append({"name": "HOME", "value": "/tmp"})
    return out


def _pairs(values: dict) -> list[dict]:
    return [{"name": k, "value": str(v)} for k, v in values.items()]


def apply_env(pod: dict, ctx: RenderContext) -> dict:
    container = pod["spec"]["containers"][0]
    container["env"] = [*torchrun_env(ctx), *trainer_env(ctx), *user_env(ctx)]
    return pod
