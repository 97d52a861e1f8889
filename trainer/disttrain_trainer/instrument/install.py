"""`python -m disttrain_trainer.instrument.install DIR`: what the instrument init container
runs (see __init__.py). Copies the pure-Python packages the hooks need into DIR/lib and
the start-up file into DIR/boot; DIR is an emptyDir the trainer container mounts."""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

# What the session and the callbacks import, beyond torch and the frameworks themselves.
PACKAGES = ("disttrain_trainer", "disttrain", "prometheus_client")
BOOT = "boot"
LIB = "lib"


def install(dest: Path) -> list[str]:
    """Copy PACKAGES into dest/lib and the start-up file into dest/boot; the package names."""
    lib, boot = dest / LIB, dest / BOOT
    lib.mkdir(parents=True, exist_ok=True)
    boot.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:
        source = Path(importlib.import_module(name).__file__ or "").parent
        shutil.copytree(source, lib / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                        dirs_exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("boot.py"), boot / "sitecustomize.py")
    return list(PACKAGES)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m disttrain_trainer.instrument.install",
                                     description="Copy disttrain's instrumentation into a folder.")
    parser.add_argument("dest", type=Path, help="the folder (an emptyDir the trainer mounts)")
    args = parser.parse_args(argv)
    copied = install(args.dest)
    print(f"disttrain instrument: copied {', '.join(copied)} into {args.dest / LIB}; "
          f"start-up file {args.dest / BOOT / 'sitecustomize.py'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
