"""A Python function as a job's trainer (`Client.train(func, ...)`): its source and
keyword arguments travel in the job's `spec.trainer.args`, and every worker runs them
with `python -m disttrain_trainer.function` under torchrun (disttrain_trainer/function.py).

The function runs in the job's image, never in the caller's Python: what it uses must be
imported inside it, and its arguments are JSON. Both are checked here, before anything
reaches the cluster, so a function that could not run there fails on the caller's side,
naming what it lacks.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import re
import secrets
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

from disttrain.api.names import MAX_JOB_NAME_LENGTH

MODULE = "disttrain_trainer.function"  # the trainer image's runner of a shipped function
# One argument of a process may be at most 128 KiB (Linux's MAX_ARG_STRLEN); the source
# and the arguments are kept well under it, and the object under etcd's 1.5 MB.
MAX_SOURCE_BYTES = 96 * 1024


class NotShippable(ValueError):
    """The function cannot run in a pod as it is; the message says why and what to do."""


def function_trainer(func: Callable[..., Any], kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """spec.trainer for running `func(**kwargs)` on every worker."""
    name, source = function_source(func)
    encoded = encode_kwargs(func, kwargs or {})
    size = len(source.encode()) + len(encoded.encode())
    if size > MAX_SOURCE_BYTES:
        raise NotShippable(f"{name}: its source and arguments take {size} bytes, more than the {MAX_SOURCE_BYTES} "
                           "a job can carry: put the code in the image (spec.image) and run it with "
                           "spec.trainer.command")
    return {"command": ["--module", MODULE], "args": ["--name", name, "--kwargs", encoded, "--source", source]}


def function_source(func: Callable[..., Any]) -> tuple[str, str]:
    """(name, source) of a plain `def` function, without its decorators (they would run in
    the pod, where they may not exist). Refuses what cannot run apart from the caller:
    lambdas, closures, and names the function reads from the module around it."""
    func = inspect.unwrap(func)  # a decorator made with functools.wraps: the function it wraps
    if not inspect.isfunction(func):
        raise NotShippable(f"{func!r} is not a function defined with def: pass a plain function")
    name = func.__name__
    if name == "<lambda>":
        raise NotShippable("a lambda cannot be shipped (its source is the whole line around it): "
                           "define the training function with def")
    if func.__code__.co_freevars:
        raise NotShippable(f"{name} uses {', '.join(func.__code__.co_freevars)} from the function around it: "
                           "define it at module level and pass values as keyword arguments")
    try:
        text = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError) as exc:
        raise NotShippable(f"{name}: its source cannot be read ({exc}); define it in a file or a notebook "
                           "cell, not typed into an interactive prompt") from None
    node = next((n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
    if node is None or node.name != name:
        raise NotShippable(f"{name}: its source does not define it with def")
    if isinstance(node, ast.AsyncFunctionDef):
        raise NotShippable(f"{name} is async: the runner calls a plain function")
    node.decorator_list = []
    outside = sorted(free_names(node) - {name})
    if outside:
        raise NotShippable(f"{name} uses {', '.join(outside)}, defined outside it: the pod runs the function alone, "
                           f"so import or define {'them' if len(outside) > 1 else 'it'} inside {name}")
    return name, ast.unparse(node) + "\n"


def free_names(func: ast.FunctionDef) -> set[str]:
    """The names a function reads that neither it nor Python's builtins define."""
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node is not func:
            bound.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            read.update(node.names)  # a global it writes must exist in the pod too
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
    return read - bound - set(dir(builtins))


def encode_kwargs(func: Callable[..., Any], kwargs: Mapping[str, Any]) -> str:
    """The keyword arguments as JSON, checked against the function's signature."""
    try:
        inspect.signature(func).bind(**kwargs)
    except TypeError as exc:
        raise NotShippable(f"{func.__name__}(**kwargs): {exc}") from None
    try:
        return json.dumps(dict(kwargs), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise NotShippable(f"{func.__name__}'s keyword arguments must be JSON (numbers, strings, lists, dicts, "
                           f"true/false/null): {exc}") from None


def job_name_for(func: Callable[..., Any]) -> str:
    """A fresh job name from the function's: `train-model` -> `train-model-3f9a1c`."""
    base = re.sub(r"[^a-z0-9-]+", "-", getattr(func, "__name__", "function").lower()).strip("-") or "function"
    suffix = secrets.token_hex(3)
    return f"{base[:MAX_JOB_NAME_LENGTH - len(suffix) - 1].rstrip('-')}-{suffix}"
