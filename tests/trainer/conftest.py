"""Trainer tests: make the trainer, the operator (for `run --local`) and the helpers
importable, and keep torch to one thread (other jobs share the CPUs)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (HERE, ROOT / "trainer", ROOT / "operator"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_under_pytests_basetemp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The torchrun agents these tests start leave a temporary directory each (more when
    killed): under pytest's basetemp, which pytest prunes, instead of the machine's /tmp."""
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmp"))
    yield
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
