"""Defaults and topology resolution. Pure: a spec in, a new spec (or Resolved) out.

Static defaults come from the field metadata (the same numbers the CRD carries);
dynamic ones (nprocPerNode: auto, precision, strategy) are resolved here together with
the guardrails, each of which says what it did instead of what was asked.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.api.errors import FieldError, GuardrailWarning, unset
from disttrain.api.meta import fields_of, meta_of
from disttrain.api.names import CREDENTIAL_ENV, ENDPOINT_ENV
from disttrain.api.parse import parse_object
from disttrain.api.pod_contract import CHECKPOINT_DIR, DDP_SINGLE_DEVICE, dataset_for
from disttrain.api import reasons

FSDP_SINGLE_DEVICE = "FSDP requires multiple devices, falling back to single-device training"


def apply_defaults(obj: Any) -> Any:
    """Fill every unset field that has a static default, recursively. Idempotent."""
    if isinstance(obj, t.Job):
        return dataclasses.replace(obj, spec=apply_defaults(obj.spec))
    changes = {}
    for f, shape in fields_of(type(obj)):
        value = getattr(obj, f.name)
        default = meta_of(f).default
        if value is None and default is not None:
            value = parse_object(shape.cls, default, "")[0] if shape.kind == "object" else default
        if value is not None and shape.kind == "object":
            value = apply_defaults(value)
        changes[f.name] = value
    obj = dataclasses.replace(obj, **changes)
    if isinstance(obj, t.BuiltinTrainer) and obj.dataset is None:
        obj = dataclasses.replace(obj, dataset=dataset_for(obj.model))
    return obj


PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
SHELLS = ("sh", "bash", "dash", "zsh")


def settle_trainer(job: t.Job) -> tuple[t.Job, list[GuardrailWarning], list[FieldError]]:
    """The trainer as torchrun will run it. No trainer: the built-in one, said out loud.
    A command that starts a launcher the pod already runs (`python -m X`, `python x.py`,
    `torchrun x.py`) is translated, with a warning; launcher flags stay an error."""
    trainer = job.spec.trainer
    if trainer is None:
        builtin = apply_defaults(t.BuiltinTrainer())
        warning = GuardrailWarning(
            reasons.DEFAULT_TRAINER, "spec.trainer",
            f"not set: running the built-in trainer (python -m disttrain_trainer): model "
            f"{builtin.model} on dataset {builtin.dataset}, {builtin.steps} steps, batchSize "
            f"{builtin.batch_size}; set spec.trainer.builtin or spec.trainer.command to choose")
        spec = dataclasses.replace(job.spec, trainer=t.TrainerSpec(builtin=builtin))
        return dataclasses.replace(job, spec=spec), [warning], []
    if not trainer.command:
        return job, [], []
    command, warning, errors = translate_command(trainer.command)
    if command is None:
        return job, [], errors
    if warning is None:
        return job, [], []
    spec = dataclasses.replace(job.spec, trainer=dataclasses.replace(trainer, command=command))
    return dataclasses.replace(job, spec=spec), [warning], []


def translate_command(command: list[str]) -> tuple[list[str] | None, GuardrailWarning | None, list[FieldError]]:
    """(command for `torchrun <command>`, warning if translated, errors)."""
    head = os.path.basename(command[0])
    rest = command[1:]
    path = "spec.trainer.command"
    if head in SHELLS:
        return None, None, [FieldError(f"{path}[0]", command[0], "is a shell, but torchrun runs "
                                       "command[0] with python", "a Python script, or --module NAME",
                                       "move the shell steps into the image or a Python script")]
    torchrun_module = PYTHON.fullmatch(head) and rest[:2] in (["-m", "torch.distributed.run"],
                                                              ["-m", "torch.distributed.launch"])
    if head == "torchrun" or torchrun_module:
        launcher = command[:3] if torchrun_module else command[:1]
        args = command[len(launcher):]
        if args[:1] in (["-m"], ["--module"]) and len(args) > 1:
            translated = ["--module", *args[1:]]
        elif args and not args[0].startswith("-"):
            translated = args
        else:
            flags = [a for a in args if a.startswith("-")][:4]
            return None, None, [FieldError(
                f"{path}[{len(launcher)}]", args[0] if args else unset(),
                "passes torchrun flags, but disttrain sets torchrun's options from the spec",
                "the script and its arguments, or --module NAME",
                f"drop {' '.join(launcher)!r} and its flags {flags}: command: [<your script>, ...]; "
                "set spec.nodes, spec.nprocPerNode, spec.maxRestarts and spec.rendezvous instead")]
        return translated, _translated(launcher, translated), []
    if PYTHON.fullmatch(head):
        if rest[:1] == ["-m"] and len(rest) > 1:
            translated = ["--module", *rest[1:]]
        elif rest and not rest[0].startswith("-"):
            translated = rest
        else:
            return None, None, [FieldError(
                f"{path}[1]" if rest else f"{path}[0]", rest[0] if rest else command[0],
                "starts python with its own options, but torchrun starts python itself" if rest
                else "starts python without a script", "your script, or --module NAME",
                "drop the python options (for -u set env PYTHONUNBUFFERED=1): "
                "command: [<your script>, ...]" if rest else "name your script: command: [train.py]")]
        return translated, _translated(command[:1] if translated is rest else command[:2], translated), []
    return command, None, []


def _translated(dropped: list[str], command: list[str]) -> GuardrailWarning:
    return GuardrailWarning(
        reasons.LAUNCHER_TRANSLATED, "spec.trainer.command",
        f"starts with {' '.join(dropped)!r}, but the pod already runs torchrun: running "
        f"`torchrun {' '.join(command)}`; write command: {command!r} to silence this")


@dataclass(frozen=True, slots=True)
class Images:
    """What a job that names no image runs: the operator's trainer image
    (DISTTRAIN_TRAINER_IMAGE, the chart's trainerImage), unless the job resolved one before."""

    image: str = t.DEFAULT_IMAGE
    instrument_image: str = t.DEFAULT_IMAGE

    @classmethod
    def of(cls, trainer_image: str, before: Resolved | None = None) -> Images:
        """A job keeps the images it was first given, so an operator upgrade that changes its
        trainer image never mixes two builds in one job's world (a recovered worker would
        otherwise start from the new one)."""
        return cls(image=(before and before.image) or trainer_image,
                   instrument_image=(before and before.instrument_image) or trainer_image)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Images:
        """The CLI's offline render shows what an operator with this setting would create."""
        return cls.of(env.get(TRAINER_IMAGE_ENV) or t.DEFAULT_IMAGE)


TRAINER_IMAGE_ENV = "DISTTRAIN_TRAINER_IMAGE"


def with_image(job: t.Job, images: Images) -> t.Job:
    if job.spec.image:
        return job
    return dataclasses.replace(job, spec=dataclasses.replace(job.spec, image=images.image))


def resolve(spec: t.DistributedTrainingSpec, images: Images = Images()
            ) -> tuple[Resolved, list[GuardrailWarning], list[FieldError]]:
    """Resolve topology, strategy, precision and images of a defaulted spec."""
    warnings: list[GuardrailWarning] = []
    errors: list[FieldError] = []
    nproc = resolve_nproc(spec, warnings, errors)
    nodes = spec.nodes
    min_nodes = spec.min_nodes if spec.min_nodes is not None else nodes
    max_nodes = spec.max_nodes if spec.max_nodes is not None else nodes
    world = nodes * nproc
    strategy = resolve_strategy(spec, max_nodes * nproc, warnings, errors)
    if not errors:  # a mesh error on top of a bad nprocPerNode would only repeat it
        errors += check_mesh(spec, world, nproc, min_nodes, max_nodes, warnings)
    precision = resolve_precision(spec, strategy, warnings)
    errors += checkpoint_errors(spec, max_nodes)
    warnings += checkpoint_warnings(spec, max_nodes)
    warnings += image_warnings(spec)
    resolved = Resolved(strategy=strategy, nodes=nodes, min_nodes=min_nodes,
                          max_nodes=max_nodes, nproc_per_node=nproc, world_size=world,
                          precision=precision, image=spec.image or images.image,
                          instrument_image=(spec.trainer.instrument_image or images.instrument_image)
                          if spec.trainer and spec.trainer.instrument == "auto" else None)
    return resolved, warnings, errors


def resolve_nproc(spec: t.DistributedTrainingSpec, warnings: list, errors: list) -> int:
    gpus, asked = spec.gpus, spec.nproc_per_node
    if isinstance(asked, str):
        if asked != "auto":
            errors.append(FieldError("spec.nprocPerNode", asked, "is not allowed",
                                     "an integer >= 1 or auto", "write auto or a number"))
        return gpus if gpus > 0 else 1
    if asked < 1 or asked > t.MAX_NPROC_PER_NODE:
        errors.append(FieldError("spec.nprocPerNode", asked, "is out of range",
                                 f"an integer from 1 to {t.MAX_NPROC_PER_NODE} (one process per "
                                 "GPU or per group of CPU cores; no node has more), or auto",
                                 "use auto"))
        return 1
    if gpus > 0 and asked > gpus:
        if spec.mesh is not None:
            errors.append(FieldError(
                "spec.nprocPerNode", asked, f"asks for more processes than the {gpus} GPUs per node",
                f"at most gpusPerNode ({gpus}); clamping would change the world size the mesh "
                "was sized for", f"set nprocPerNode: {gpus} (or auto) and resize spec.mesh"))
            return gpus
        warnings.append(GuardrailWarning(
            reasons.NPROC_CLAMPED, "spec.nprocPerNode",
            f"nprocPerNode {asked} is more than gpusPerNode {gpus}; one process per GPU: "
            f"clamping nprocPerNode to {gpus}"))
        return gpus
    if asked < gpus:  # asked >= 1 here
        warnings.append(GuardrailWarning(
            reasons.IDLE_GPUS, "spec.nprocPerNode",
            f"nprocPerNode {asked} leaves {gpus - asked} of {gpus} GPUs per node idle; "
            "use nprocPerNode: auto to use them all"))
    return asked


def resolve_strategy(spec: t.DistributedTrainingSpec, max_devices: int, warnings: list,
                     errors: list) -> str:
    asked = spec.strategy or "auto"
    strategy = "fsdp" if asked == "fsdp_native" else asked
    if spec.mesh is not None:
        if strategy == "ddp":
            errors.append(FieldError("spec.strategy", asked, "cannot be combined with spec.mesh",
                                     "fsdp or auto with a mesh",
                                     "set strategy: fsdp, or remove spec.mesh"))
        return "fsdp"
    if max_devices == 1 and strategy in ("ddp", "fsdp"):
        said, reason, to = ((DDP_SINGLE_DEVICE, reasons.DDP_SINGLE_DEVICE, "replicate over") if strategy == "ddp"
                            else (FSDP_SINGLE_DEVICE, reasons.FSDP_SINGLE_DEVICE, "shard across"))
        # The strategy the topology line prints, and the fix: the one it runs, or the devices it needs.
        warnings.append(GuardrailWarning(reason, "spec.strategy", f"{said}: the job runs strategy auto. Fix: set "
                                         f"strategy: auto, or give the job more devices (nodes, gpusPerNode) to {to}"))
        return "auto"
    return strategy


def check_mesh(spec: t.DistributedTrainingSpec, world: int, nproc: int, min_nodes: int,
               max_nodes: int, warnings: list) -> list[FieldError]:
    mesh = spec.mesh
    if mesh is None:
        return []
    errors = []
    if min_nodes != spec.nodes or max_nodes != spec.nodes:
        errors.append(FieldError("spec.mesh", {"fsdp": mesh.fsdp, "tp": mesh.tp},
                                 "needs a fixed world size", "minNodes = nodes = maxNodes",
                                 "remove spec.minNodes/spec.maxNodes or set both to spec.nodes"))
    if mesh.fsdp * mesh.tp != world:
        fix = (f"set mesh.fsdp: {world // mesh.tp}" if world % mesh.tp == 0
               else f"choose tp dividing the world size {world}")
        errors.append(FieldError("spec.mesh", {"fsdp": mesh.fsdp, "tp": mesh.tp},
                                 f"fsdp x tp = {mesh.fsdp * mesh.tp} is not the world size "
                                 f"{world} (nodes {spec.nodes} x nprocPerNode {nproc})",
                                 "fsdp x tp = nodes x nprocPerNode", fix))
    elif nproc % mesh.tp != 0:
        warnings.append(GuardrailWarning(
            reasons.TP_ACROSS_NODES, "spec.mesh.tp",
            f"tp {mesh.tp} does not divide nprocPerNode {nproc}: tensor-parallel groups "
            "span nodes and every layer waits on the network; prefer tp dividing nprocPerNode"))
    return errors


def resolve_precision(spec: t.DistributedTrainingSpec, strategy: str, warnings: list) -> str:
    on_gpu = spec.gpus > 0
    asked = spec.precision
    if asked is None:
        return "bf16-mixed" if on_gpu else "32"
    if asked == "16-mixed" and not on_gpu:
        warnings.append(GuardrailWarning(
            reasons.PRECISION_FALLBACK, "spec.precision",
            "16-mixed needs CUDA GPUs (gpusPerNode is 0): falling back to 32; "
            "use bf16-mixed or 32 on CPU"))
        return "32"
    if strategy == "fsdp" and on_gpu and asked == "32":
        warnings.append(GuardrailWarning(
            reasons.FSDP_WITHOUT_BF16, "spec.precision",
            "FSDP on GPUs with precision 32: parameters are all-gathered and computed in fp32; "
            "bf16-mixed all-gathers them in bf16, halving that traffic and the gathered parameters' "
            "memory (gradients are reduced in fp32 either way)"))
    elif strategy == "fsdp" and on_gpu and asked == "16-mixed":
        warnings.append(GuardrailWarning(
            reasons.FSDP_WITHOUT_BF16, "spec.precision",
            "FSDP on GPUs with precision 16-mixed: fp16 needs a gradient scaler and can overflow; "
            "bf16-mixed moves the same bytes (parameters in 16 bits, gradients reduced in fp32) without either"))
    return asked


def checkpoint_errors(spec: t.DistributedTrainingSpec, max_nodes: int) -> list[FieldError]:
    """Where checkpoints go must be said once and consistently. Several pods running the
    built-in trainer need storage every pod reaches (a claim or an object-store URI): each
    pod's emptyDir holds only its own shards, rank 0 alone writes the checkpoint's metadata
    and purges old steps, so a resume fails on every rank and the other pods' partial steps
    are never cleaned up. A job of the user's own command decides that for itself
    (checkpoint_warnings)."""
    ckpt, errors = spec.checkpoint, []
    if ckpt.uri is not None and ckpt.claim_name is not None:
        errors.append(FieldError(
            "spec.checkpoint.uri", ckpt.uri, "is set together with claimName: checkpoints go to one place",
            "one of uri (object storage) or claimName (a volume)",
            "remove spec.checkpoint.claimName to use the object store, or uri to use the volume"))
    for field, value in (("secretRef", ckpt.secret_ref), ("endpoint", ckpt.endpoint)):
        if value is not None and ckpt.uri is None:
            shown = value.name if isinstance(value, t.SecretRef) else value
            errors.append(FieldError(
                f"spec.checkpoint.{field}", shown, "only applies to an object store, and uri is not set",
                "with spec.checkpoint.uri: s3://<bucket>/<prefix>",
                f"set spec.checkpoint.uri, or remove spec.checkpoint.{field}"))
    place = "uri" if ckpt.uri is not None else "claimName" if ckpt.claim_name is not None else None
    if ckpt.storage == "none" and place is not None:
        errors.append(FieldError(
            "spec.checkpoint.storage", "none", f"says the job keeps no checkpoints, but {place} names where "
            "to keep them", "none without uri and claimName, or auto",
            f"remove storage: none to checkpoint there, or remove spec.checkpoint.{place}"))
    ours = ({*CREDENTIAL_ENV} if ckpt.secret_ref is not None else set()) | (
        {ENDPOINT_ENV} if ckpt.endpoint is not None else set())
    for i, var in enumerate(spec.env or []):
        if ckpt.uri is not None and var.name in ours:
            source = "secretRef" if var.name in CREDENTIAL_ENV else "endpoint"
            errors.append(FieldError(
                f"spec.env[{i}].name", var.name, f"is set from spec.checkpoint.{source}",
                "a name the checkpoint settings do not set",
                f"remove it from spec.env, or remove spec.checkpoint.{source}"))
    if (max_nodes > 1 and spec.trainer.builtin is not None and ckpt.storage != "none"
            and ckpt.claim_name is None and ckpt.uri is None):
        size = f"maxNodes {max_nodes}" if spec.max_nodes is not None else f"nodes {spec.nodes}"  # what the user set
        errors.append(FieldError(
            "spec.checkpoint", unset(), f"has no storage every pod reaches, and the job can have more than "
            f"one pod ({size}): the built-in trainer could never resume",
            "uri (object storage) or claimName (a ReadWriteMany volume), or storage: none",
            "set spec.checkpoint.uri: s3://<bucket>/<prefix> with secretRef, or claimName: <a "
            "ReadWriteMany claim> (docs/guide.md, Checkpoints), or storage: none to run without "
            "checkpoints; `disttrain run --local` keeps checkpoints in --workdir whatever the spec says"))
    return errors


def checkpoint_warnings(spec: t.DistributedTrainingSpec, max_nodes: int) -> list[GuardrailWarning]:
    ckpt, out = spec.checkpoint, []
    unstated = ckpt.claim_name is None and ckpt.uri is None and ckpt.storage != "none"
    if unstated and max_nodes <= 1:
        out.append(GuardrailWarning(
            reasons.EPHEMERAL_CHECKPOINTS, "spec.checkpoint.claimName",
            "not set: checkpoints live in the pod's emptyDir and are lost when the pod is "
            "recreated; set checkpoint.uri (object storage) or claimName (a volume), or "
            "storage: none if the job keeps none"))
    elif unstated and spec.trainer.builtin is None:
        out.append(GuardrailWarning(
            reasons.CHECKPOINTS_NOT_SHARED, "spec.checkpoint",
            f"no uri or claimName on a job of up to {max_nodes} pods: {CHECKPOINT_DIR.env} is "
            "each pod's own emptyDir, so whatever your script saves there lives nowhere durable "
            "and no other pod sees it; set checkpoint.uri or claimName, or storage: none to say "
            "the job keeps no checkpoints"))
    builtin = spec.trainer.builtin
    if builtin is not None and ckpt.storage != "none" and ckpt.interval_steps > builtin.steps:
        out.append(GuardrailWarning(
            reasons.CHECKPOINT_INTERVAL_BEYOND_STEPS, "spec.checkpoint.intervalSteps",
            f"intervalSteps {ckpt.interval_steps} is more than steps {builtin.steps}: no "
            "checkpoint before the end, a failure restarts from step 0"))
    return out


def image_warnings(spec: t.DistributedTrainingSpec) -> list[GuardrailWarning]:
    image = spec.image
    tag = image.rsplit("/", 1)[-1]
    if "@" in tag or spec.image_pull_policy != "IfNotPresent":
        return []
    if ":" not in tag or tag.endswith(":latest"):
        return [GuardrailWarning(
            reasons.MUTABLE_IMAGE_TAG, "spec.image",
            f"image {image!r} uses the latest tag with imagePullPolicy IfNotPresent: nodes "
            "may run different cached builds; pin a tag or digest")]
    return []
