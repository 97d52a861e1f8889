"""Post-import hooks: when the user's code imports a Trainer class that instrument: auto
supports, its `__init__` is wrapped so every Trainer built gets disttrain's callback (once;
one the code added itself counts). Only in a disttrain pod (DISTTRAIN_JOB_NAME set).

A framework version below the supported one is left alone, with a warning; a program that
builds no supported Trainer runs as it would without instrument, and says so when it ends.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True, slots=True)
class Framework:
    name: str  # the distribution, as `pip show` names it
    package: str  # whose __version__ is read
    module: str  # the module that defines the Trainer class
    minimum: tuple[int, int]
    attach: Callable[[type, str], None]


def _version(package: str) -> str:
    return str(getattr(sys.modules.get(package), "__version__", "0"))


def _parts(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2])


attached: list[str] = []  # "transformers 5.24.0", once a Trainer class is wrapped


def _attach_transformers(trainer: type, label: str) -> None:
    original = trainer.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        from disttrain_trainer.hf_callback import DisttrainCallback
        if not any(isinstance(cb, DisttrainCallback) for cb in self.callback_handler.callbacks):
            self.add_callback(DisttrainCallback(framework=label))

    trainer.__init__ = __init__  # type: ignore[method-assign]


def _attach_lightning(trainer: type, label: str) -> None:
    original = trainer.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        from disttrain_trainer.lightning_callback import DisttrainCallback
        given = kwargs.get("callbacks")
        callbacks = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
        if not any(isinstance(cb, DisttrainCallback) for cb in callbacks):
            callbacks.append(DisttrainCallback(framework=label))
        original(self, *args, **{**kwargs, "callbacks": callbacks})

    trainer.__init__ = __init__  # type: ignore[method-assign]


FRAMEWORKS = (
    Framework("transformers", "transformers", "transformers.trainer", (4, 40), _attach_transformers),
    Framework("lightning", "lightning", "lightning.pytorch.trainer.trainer", (2, 0), _attach_lightning),
    Framework("pytorch-lightning", "pytorch_lightning", "pytorch_lightning.trainer.trainer", (2, 0),
              _attach_lightning),
)


def _patch(framework: Framework, module: ModuleType) -> None:
    version = _version(framework.package)
    label = f"{framework.name} {version}"
    if _parts(version) < framework.minimum:
        _warn(f"{label} is older than {framework.name} {'.'.join(map(str, framework.minimum))}, the oldest "
              "instrument: auto supports: its Trainer is left alone (no progress in status, no hang detection, "
              "SIGTERM instead of checkpoint-then-evict); upgrade it, or add disttrain.train's callback yourself")
        return
    trainer = getattr(module, "Trainer", None)
    if not isinstance(trainer, type):
        _warn(f"{label}: {framework.module} has no Trainer class; nothing attached")
        return
    framework.attach(trainer, label)
    attached.append(label)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the hooked modules through the other finders, then runs the patch right after
    the module's own code (a post-import hook)."""

    def __init__(self, frameworks: Sequence[Framework]) -> None:
        self.by_module = {f.module: f for f in frameworks}
        self._finding: set[str] = set()

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        framework = self.by_module.get(name)
        if framework is None or name in self._finding:
            return None
        self._finding.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, run = spec.loader, spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            try:
                _patch(framework, module)
            except Exception as exc:  # noqa: BLE001 (never the user's failure)
                _warn(f"could not attach to {framework.name}: {type(exc).__name__}: {exc}")

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def accelerate_on_cpu(env: MutableMapping[str, str] | None = None) -> bool:
    """In a disttrain pod with no GPU (DISTTRAIN_GPUS_PER_NODE 0) and more than one process,
    tell Accelerate, which Transformers' Trainer runs on, to train on the CPU across the
    processes (gloo), as `--use_cpu true` would: without ACCELERATE_USE_CPU each process
    trains alone as a world of one, while the job reports its world size. A value the job
    sets itself stays. True when it set the variable."""
    env = os.environ if env is None else env
    # pod_contract's JOB_NAME and GPUS_PER_NODE, spelled here: this runs at every
    # interpreter's start, and importing the API package would cost each one.
    if (not env.get("DISTTRAIN_JOB_NAME") or env.get("DISTTRAIN_GPUS_PER_NODE", "0") != "0"
            or int(env.get("WORLD_SIZE", "1") or 1) < 2 or "ACCELERATE_USE_CPU" in env):
        return False
    env["ACCELERATE_USE_CPU"] = "true"
    return True


def install(env: dict[str, str] | None = None) -> bool:
    """Hook the frameworks (already imported ones at once). False outside a disttrain pod."""
    env = dict(os.environ) if env is None else env
    # pod_contract.JOB_NAME, spelled here: this runs at every interpreter's start, before
    # anything of disttrain is imported, and importing the API package would cost each one.
    if not env.get("DISTTRAIN_JOB_NAME") or "RANK" not in env:  # a worker, not torchrun's agent
        return False
    accelerate_on_cpu()
    sys.meta_path.insert(0, _Finder(FRAMEWORKS))
    for framework in FRAMEWORKS:
        if framework.module in sys.modules:
            _patch(framework, sys.modules[framework.module])
    if env.get("LOCAL_RANK", "0") == "0":  # one word per pod
        atexit.register(_say_if_unused)
    return True


def _say_if_unused() -> None:
    if not attached:
        _warn("this program built no Transformers or Lightning Trainer that instrument: auto supports: it ran "
              "without disttrain's reporting (no progress in status, no hang detection, SIGTERM instead of "
              "checkpoint-then-evict). docs/training-api.md shows the session for a loop of your own")


def _warn(message: str) -> None:
    print(f"disttrain instrument: {message}", file=sys.stderr, flush=True)
