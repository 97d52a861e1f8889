"""`python -m disttrain_trainer.function --name F --kwargs JSON --source SRC` (under
torchrun): run a Python function a user shipped with `Client.train(func, ...)`.

The function gets torchrun's environment as any script does (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR ...) and sets up torch.distributed itself; a process group it
leaves is torn down when it returns. It returning is the worker's success (exit 0); an
exception is its failure, with the traceback pointing at the lines of the function's own
source."""

from __future__ import annotations

import argparse
import json
import linecache
from collections.abc import Sequence
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record


def load(name: str, source: str) -> Any:
    """The function `name` defined by `source`, its lines known to tracebacks."""
    filename = f"<disttrain function {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"__name__": "__disttrain_function__"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (the job's own code, run in its own pod)
    return namespace[name]


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m disttrain_trainer.function",
                                     description="Run a function shipped by Client.train().")
    parser.add_argument("--name", required=True, help="the function's name in the source")
    parser.add_argument("--kwargs", default="{}", help="its keyword arguments as a JSON object")
    parser.add_argument("--source", required=True, help="Python source that defines it")
    return parser.parse_args(argv)


@record
def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    kwargs = json.loads(args.kwargs)
    if not isinstance(kwargs, dict):
        raise SystemExit(f"--kwargs must be a JSON object, got {type(kwargs).__name__}")
    load(args.name, args.source)(**kwargs)
    release_process_group()


def release_process_group() -> None:
    """Tear down the process group a function set up and left (docs/cli.md's example
    does): left to the interpreter's exit, gloo's threads abort the process more often than
    not ("terminate called without an active exception", SIGABRT) after the function has
    succeeded, which torchrun reads as the worker's failure and the job restarts."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
