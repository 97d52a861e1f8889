"""Trainer tests: make the trainer, the operator (for `run --local`) and the helpers
importable, and keep torch to one thread (other jobs share the CPUs)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (HERE, ROOT / "trainer", ROOT / "operator"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
torch.set_num_threads(1)
