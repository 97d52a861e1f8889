"""A Python function as a job's trainer (function_job.py): what is shipped, and every way
a function that could not run in a pod is refused before anything reaches a cluster."""

from __future__ import annotations

import functools
import json
import math

import pytest

from disttrain.api.names import MAX_JOB_NAME_LENGTH
from disttrain.api.validate import validate_document
from disttrain.client.function_job import (MAX_SOURCE_BYTES, MODULE, NotShippable, function_source, function_trainer,
                                           job_name_for)

SCALE = 3


def train_gloo(steps: int, lr: float = 0.1) -> None:
    """Module-level and self-contained: what train() ships."""
    import os

    import torch.distributed as dist

    dist.init_process_group("gloo")
    for step in range(steps):
        print(os.environ["RANK"], step, lr)


def traced(func):
    @functools.wraps(func)
    def inner(*args, **kwargs):
        return func(*args, **kwargs)
    return inner


@traced
def decorated(x: int) -> int:
    return x + 1


def uses_module_global() -> float:
    return math.sqrt(SCALE)


def uses_everything_it_defines(items: list[int]) -> int:
    import collections as c
    from os import path as p

    class Box:
        pass

    def helper(v):
        return v * 2

    total = 0
    for i, item in enumerate(items):
        try:
            total += helper(item) + i + len(p.sep) + len(c.Counter()) + len([Box()])
        except ValueError as exc:
            print(exc)
    squares = [n * n for n in range(3)]
    with open("/dev/null") as handle:
        handle.read()
    match total:
        case int() as whole:
            return whole + sum(squares)
        case _:
            return 0


async def asynchronous() -> None:
    return None


def test_the_trainer_runs_the_module_with_the_source_and_the_kwargs_as_json():
    trainer = function_trainer(train_gloo, {"steps": 5})
    assert trainer["command"] == ["--module", MODULE]
    args = dict(zip(trainer["args"][::2], trainer["args"][1::2]))
    assert args["--name"] == "train_gloo" and json.loads(args["--kwargs"]) == {"steps": 5}
    assert args["--source"].startswith("def train_gloo(steps: int, lr: float=0.1) -> None:\n")
    compile(args["--source"], "<shipped>", "exec")  # the source alone is a module that defines it


def test_a_job_made_of_a_function_passes_the_operators_validation():
    doc = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
           "metadata": {"name": job_name_for(train_gloo), "namespace": "ns"},
           "spec": {"nodes": 1, "nprocPerNode": 2, "gpusPerNode": 0, "trainer": function_trainer(train_gloo, {"steps": 5})}}
    result = validate_document(doc)
    assert result.ok, result.errors
    assert not [w for w in result.warnings if "trainer" in str(w)]  # run as shipped, nothing translated


def test_decorators_are_left_behind_they_may_not_exist_in_the_pod():
    _name, source = function_source(decorated)
    assert "@" not in source and source.startswith("def decorated(x: int) -> int:")


def test_names_the_function_binds_itself_are_not_outside_names():
    assert function_source(uses_everything_it_defines)[0] == "uses_everything_it_defines"


@pytest.mark.parametrize("func, words", [
    pytest.param(uses_module_global, "uses SCALE, math, defined outside it: the pod runs the function alone, "
                 "so import or define them inside uses_module_global", id="module-globals"),
    pytest.param(lambda: None, "a lambda cannot be shipped", id="lambda"),
    pytest.param(asynchronous, "asynchronous is async", id="async"),
    pytest.param(len, "is not a function defined with def", id="builtin"),
    pytest.param(functools.partial(train_gloo, 3), "is not a function defined with def", id="partial"),
])
def test_a_function_that_cannot_run_alone_is_refused_with_what_it_lacks(func, words):
    with pytest.raises(NotShippable) as caught:
        function_trainer(func)
    assert words in str(caught.value)


def test_a_closure_names_what_it_captures():
    factor = 2

    def scaled(x):
        return x * factor

    with pytest.raises(NotShippable, match=r"scaled uses factor from the function around it"):
        function_trainer(scaled, {"x": 1})


@pytest.mark.parametrize("kwargs, words", [
    pytest.param({"steps": 1, "momentum": 0.9}, "unexpected keyword argument 'momentum'", id="unknown"),
    pytest.param({}, "missing a required argument: 'steps'", id="missing"),
    pytest.param({"steps": {1, 2}}, "must be JSON", id="a-set"),
    pytest.param({"steps": float("nan")}, "must be JSON", id="nan"),
])
def test_keyword_arguments_must_fit_the_signature_and_be_json(kwargs, words):
    with pytest.raises(NotShippable, match=words):
        function_trainer(train_gloo, kwargs)


def test_a_function_too_big_for_a_pod_argument_says_to_put_it_in_the_image():
    with pytest.raises(NotShippable, match=f"more than the {MAX_SOURCE_BYTES} a job can carry: put the code in the "
                                           "image"):
        function_trainer(_big, {"blob": "x" * MAX_SOURCE_BYTES})


def _big(blob: str) -> int:
    return len(blob)


@pytest.mark.parametrize("func_name, expected", [("train_gloo", "train-gloo-"), ("_Private__x", "private-x-"),
                                                 ("x" * 100, "x" * (MAX_JOB_NAME_LENGTH - 7) + "-")])
def test_a_job_name_from_the_function_is_a_dns_label_with_a_random_suffix(func_name, expected):
    def f():
        return None
    f.__name__ = func_name
    name = job_name_for(f)
    assert name.startswith(expected) and len(name) == len(expected) + 6 and len(name) <= MAX_JOB_NAME_LENGTH
    assert job_name_for(f) != name
