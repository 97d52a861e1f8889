"""instrument: auto (docs/training-api.md, "Zero-code instrumentation"): an init container
from instrumentImage copies disttrain's package into an emptyDir, and the trainer
container's PYTHONPATH starts with its start-up folder, whose sitecustomize attaches the
callback to the user's Transformers or Lightning Trainer. The pattern of the OpenTelemetry
operator's Python auto-instrumentation; nothing of the user's image changes."""

from __future__ import annotations

from disttrain.render.context import RenderContext

VOLUME = "disttrain-instrument"
FOLDER = "/opt/disttrain-instrument"
INIT_CONTAINER = "disttrain-instrument"
BOOT = f"{FOLDER}/boot"  # what disttrain_trainer.instrument.install writes its sitecustomize.py into
# The copy is a few MB of Python; the limits keep a bad image from filling the node.
SIZE_LIMIT = "64Mi"
INIT_RESOURCES = {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}


def instrument(pod: dict, ctx: RenderContext) -> dict:
    trainer = ctx.spec.trainer
    if trainer.instrument != "auto":
        return pod
    spec = pod["spec"]
    container = spec["containers"][0]
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": VOLUME, "emptyDir": {"sizeLimit": SIZE_LIMIT}}]
    container["volumeMounts"] = [*(container.get("volumeMounts") or []),
                                 {"name": VOLUME, "mountPath": FOLDER, "readOnly": True}]
    spec["initContainers"] = [{
        "name": INIT_CONTAINER, "image": ctx.resolved.instrument_image,
        "imagePullPolicy": ctx.spec.image_pull_policy,
        "command": ["python", "-m", "disttrain_trainer.instrument.install", FOLDER],
        "volumeMounts": [{"name": VOLUME, "mountPath": FOLDER}],
        "securityContext": dict(container.get("securityContext") or {}),
        "resources": INIT_RESOURCES,
    }, *(spec.get("initContainers") or [])]
    # First on the path: Python runs the first sitecustomize it finds (ours then runs the
    # image's own). A PYTHONPATH of the job's (validate: a value, not valueFrom) follows.
    env = container.get("env") or []
    theirs = next((e.get("value") for e in env if e["name"] == "PYTHONPATH"), None)
    container["env"] = [*(e for e in env if e["name"] != "PYTHONPATH"),
                        {"name": "PYTHONPATH", "value": f"{BOOT}:{theirs}" if theirs else BOOT}]
    return pod
