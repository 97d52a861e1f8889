"""Built-in datasets (nothing is downloaded) and an elastic-safe, stateful loader.

The loader's position is *global*: samples consumed in the current epoch, counted over
all data-parallel ranks. Every optimizer step takes the next `global_batch` indices of
the epoch's permutation and gives rank r its own slice of each micro-batch. Because the
position does not depend on the world size, a checkpoint written by N ranks resumes on
M ranks at exactly the next unseen sample (the job of DistributedSampler, but one that
survives a world-size change). Each epoch reshuffles with `seed + epoch`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any, Protocol

import torch
from torch.utils.data import default_collate

IN_FEATURES = 32
CLASSES = 8
SYNTHETIC_SAMPLES = 16384
VOCAB_SIZE = 256  # byte-level: UTF-8 bytes of the corpus


class Dataset(Protocol):
    """What the loader reads: whole batches by index (the built-in datasets slice tensors;
    `MapStyle` turns any map-style dataset into one)."""

    tokens_per_sample: int

    def __len__(self) -> int: ...

    def get(self, idx: torch.Tensor) -> tuple[Any, Any]: ...


class MapStyle:
    """A map-style dataset of yours (`__len__` and `__getitem__`, a `torch.utils.data.Dataset`
    or a Hugging Face `datasets.Dataset`) read a batch at a time: `collate` (torch's
    `default_collate` unless given) turns the batch's samples into (inputs, targets)."""

    def __init__(self, dataset: Any, *, collate: Callable[[list[Any]], Any] | None = None,
                 tokens_per_sample: int = 1, name: str = "data") -> None:
        self.name = name  # what the errors call it (data.train, data.eval)
        for need in ("__len__", "__getitem__"):
            if not hasattr(dataset, need):
                raise TypeError(f"{name}: {type(dataset).__name__} has no {need}; pass a map-style dataset "
                                "(torch.utils.data.Dataset or datasets.Dataset), not an iterable or a DataLoader")
        self.dataset = dataset
        self.collate = collate or default_collate
        self.tokens_per_sample = tokens_per_sample

    def __len__(self) -> int:
        return len(self.dataset)

    def get(self, idx: torch.Tensor) -> tuple[Any, Any]:
        batch = self.collate([self.dataset[i] for i in idx.tolist()])
        if isinstance(batch, Mapping) or not isinstance(batch, Sequence) or len(batch) != 2:
            raise TypeError(f"{self.name}: a batch must be (inputs, targets), got {_shape_of(batch)}; return a pair "
                            "from the dataset's __getitem__ or pass a collate that makes one")
        return batch[0], batch[1]


def _shape_of(batch: Any) -> str:
    if isinstance(batch, Mapping):
        return f"a mapping with keys {sorted(batch)}"
    if isinstance(batch, Sequence):
        return f"a {type(batch).__name__} of {len(batch)}"
    return type(batch).__name__


def to_device(batch: Any, device: torch.device) -> Any:
    """Tensors anywhere in a batch (a tensor, a mapping, a list or tuple) moved to `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple, as default_collate keeps it
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


class TextDataset:
    """Byte-level language modelling on the corpus shipped in disttrain_trainer/data."""

    def __init__(self, seq_len: int, corpus: str = "corpus.txt") -> None:
        raw = resources.files(__package__).joinpath(corpus).read_bytes()
        self.data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        self.seq_len = seq_len
        self.tokens_per_sample = seq_len
        self._n = (len(self.data) - 1) // seq_len
        self._window = torch.arange(seq_len)

    def __len__(self) -> int:
        return self._n

    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = (idx * self.seq_len)[:, None] + self._window
        return self.data[pos], self.data[pos + 1]


class SyntheticDataset:
    """A fixed random regression or classification problem, generated from the seed."""

    def __init__(self, kind: str, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(SYNTHETIC_SAMPLES, IN_FEATURES, generator=g)
        if kind == "synthetic-regression":
            w = torch.randn(IN_FEATURES, generator=g) / IN_FEATURES**0.5
            noise = 0.05 * torch.randn(SYNTHETIC_SAMPLES, generator=g)
            self.y = self.x @ w + torch.sin(2 * self.x[:, 0]) + noise
        else:
            w = torch.randn(IN_FEATURES, CLASSES, generator=g)
            self.y = (self.x @ w).argmax(dim=1)
        self.tokens_per_sample = 1

    def __len__(self) -> int:
        return SYNTHETIC_SAMPLES

    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[idx], self.y[idx]


class Subset:
    """Some samples of a dataset, renumbered 0..len-1 (the training or held-out split)."""

    def __init__(self, dataset: Dataset, indices: torch.Tensor) -> None:
        self.dataset = dataset
        self.indices = indices
        self.tokens_per_sample = dataset.tokens_per_sample

    def __len__(self) -> int:
        return len(self.indices)

    def get(self, idx: torch.Tensor) -> tuple[Any, Any]:
        return self.dataset.get(self.indices[idx])


def holdout(dataset: Dataset, *, fraction: float, fold: int) -> tuple[Dataset, Dataset | None]:
    """(train, held out): block `fold` of size floor(len * fraction), counted from the
    start, is held out. Contiguous and seed-free, so every run, world size and trial of a
    sweep scores on the same samples; fraction 1/k with folds 0..k-1 is k-fold."""
    size = int(len(dataset) * fraction)
    if size == 0:
        return dataset, None
    start = fold * size
    if start + size > len(dataset):
        raise ValueError(f"eval fold {fold} of size {size} is past the dataset's {len(dataset)} samples")
    every = torch.arange(len(dataset))
    held = (every >= start) & (every < start + size)
    return Subset(dataset, every[~held]), Subset(dataset, every[held])


def build_dataset(name: str, *, seq_len: int, seed: int) -> Dataset:
    if name == "text":
        return TextDataset(seq_len)
    if name in ("synthetic-regression", "synthetic-classification"):
        return SyntheticDataset(name, seed)
    raise ValueError(f"unknown dataset {name!r}")


class ShardedLoader:
    """Yields this rank's micro-batches for one optimizer step; `Stateful` for DCP."""

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int,
        accumulate: int,
        dp_rank: int,
        dp_size: int,
        seed: int,
        device: torch.device,
    ) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.accumulate = accumulate
        self.dp_rank = dp_rank
        self.dp_size = dp_size
        self.seed = seed
        self.device = device
        self.global_batch = batch_size * accumulate * dp_size
        if self.global_batch > len(dataset):
            raise ValueError(
                f"global batch {self.global_batch} (batch {batch_size} x dp {dp_size} x "
                f"accumulation {accumulate}) exceeds the dataset's {len(dataset)} samples"
            )
        self.epoch = 0
        self.pos = 0
        self._perm_epoch = -1
        self._perm = torch.empty(0, dtype=torch.long)

    @property
    def samples_per_step(self) -> int:
        return self.global_batch

    def _permutation(self) -> torch.Tensor:
        if self._perm_epoch != self.epoch:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            self._perm = torch.randperm(len(self.dataset), generator=g)
            self._perm_epoch = self.epoch
        return self._perm

    def next_step(self) -> list[tuple[Any, Any]]:
        """This rank's `accumulate` micro-batches of the next global batch."""
        if self.pos + self.global_batch > len(self.dataset):  # drop the ragged tail
            self.epoch += 1
            self.pos = 0
        chunk = self._permutation()[self.pos : self.pos + self.global_batch]
        self.pos += self.global_batch
        b, dp = self.batch_size, self.dp_size
        out = []
        for m in range(self.accumulate):
            start = m * b * dp + self.dp_rank * b
            x, y = self.dataset.get(chunk[start : start + b])
            out.append((to_device(x, self.device), to_device(y, self.device)))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.pos = int(state["pos"])
