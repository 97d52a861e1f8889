"""disttrain's start-up file, installed as sitecustomize.py (disttrain_trainer/instrument).

Python imports `sitecustomize` from the first folder on sys.path that has one; the worker's
PYTHONPATH puts this file's folder first. It must never stop the user's program: anything
that goes wrong is one warning line on stderr."""

import importlib.util
import os
import sys


def _start() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    lib = os.path.join(os.path.dirname(here), "lib")
    if os.path.isdir(lib) and lib not in sys.path:
        sys.path.append(lib)  # last: the image's own packages (and versions) win
    try:
        from disttrain_trainer.instrument import hooks

        hooks.install()
    except Exception as exc:  # noqa: BLE001 (the user's training goes on regardless)
        print(f"disttrain instrument: not attached ({type(exc).__name__}: {exc}); training runs as "
              "without instrument", file=sys.stderr)
    _chain(here)


def _chain(here: str) -> None:
    """Run the sitecustomize this file stands in front of (a distribution's, the image's)."""
    for entry in sys.path:
        folder = os.path.abspath(entry or os.curdir)
        path = os.path.join(folder, "sitecustomize.py")
        if folder == here or not os.path.isfile(path):
            continue
        try:
            spec = importlib.util.spec_from_file_location("_disttrain_next_sitecustomize", path)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
        except Exception as exc:  # noqa: BLE001
            print(f"disttrain instrument: the image's own {path} failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
        return


_start()
