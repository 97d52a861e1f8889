"""disttrain: run elastic, checkpoint-aware distributed PyTorch training on Kubernetes.

The packages, by role (docs/architecture.md draws them):

- `disttrain.api`: the DistributedTraining model (types, schema, parse, defaults,
  validate), its conditions and the trainer's report; shared by every side.
- `disttrain.render`: a validated job -> the objects it owns, pure.
- `disttrain.operator`: the operator's shell (kopf handlers, informers, work queue, the
  API writes); `disttrain.operator.core` its pure decisions.
- `disttrain.integrations`: what the operator does with other controllers (integrations/registry.py).
- `disttrain.client`, `disttrain.cli`, `disttrain.sweep`: the user's side.

`from disttrain import Client` submits and follows jobs from Python (a notebook, a
script) without torch or kopf; see docs/cli.md, "The Python client". The names below are
imported when first used, so the operator, which imports `disttrain.operator`, never
loads the client.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"  # pyproject.toml's and the chart's appVersion (tests/unit/test_cli.py keeps them equal)

# name -> the module that defines it
_EXPORTS = {
    "DistributedTrainingSpec": "disttrain.api.types",
    "JobView": "disttrain.client.jobview",
    "Client": "disttrain.client.client",
    "LogLine": "disttrain.client.logs",
    **{name: "disttrain.client.errors" for name in (
        "ApplyConflict", "DisttrainError", "Forbidden", "InvalidArgument", "InvalidJob", "JobFailed",
        "KubeconfigError", "NotFound", "Unreachable", "WaitTimeout")},
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'disttrain' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # once: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
