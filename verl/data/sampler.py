"""Samplers over a prompt dataset whose order is a pure function of (seed, epoch), so it can be saved and resumed."""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch

from verl.utils.seeding import epoch_seed


class ResumableSampler(torch.utils.data.Sampler[int]):
    """Yield dataset indices; random (``torch.randperm`` seeded with ``seed + epoch``) or sequential.

    Because each epoch's order is recomputed from ``(seed, epoch)``, ``state_dict()`` only needs those two
    numbers; the data loader (``verl.data.dataloader.StatefulDataLoader``) tracks the position within
    the epoch.
    """

    def __init__(self, data_source: Sized, shuffle: bool = True, seed: int = 0) -> None:
        self.num_samples = len(data_source)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order ``__iter__`` yields."""
        self.epoch = int(epoch)

    def indices(self, epoch: int | None = None) -> list[int]:
        """The full index order of ``epoch`` (default: the current epoch)."""
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return list(range(self.num_samples))
        generator = torch.Generator()
        generator.manual_seed(epoch_seed(self.seed, epoch))
        return torch.randperm(self.num_samples, generator=generator).tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices())

    def __len__(self) -> int:
        return self.num_samples

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to reproduce the order: ``{"seed", "epoch", "shuffle", "num_samples"}``."""
        return {"seed": self.seed, "epoch": self.epoch, "shuffle": self.shuffle, "num_samples": self.num_samples}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``seed`` and ``epoch``; refuses a state saved for a dataset of a different size."""
        if int(state.get("num_samples", self.num_samples)) != self.num_samples:
            raise ValueError(
                f"sampler state was saved for {state['num_samples']} samples but the dataset has "
                f"{self.num_samples}; the data files changed since the checkpoint"
            )
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.shuffle = bool(state.get("shuffle", self.shuffle))


def create_rl_sampler(data_config: Any, dataset: Sized) -> ResumableSampler:
    """Build the train sampler from the ``data`` config: seeded random when ``data.shuffle`` (seed ``data.seed``),
    otherwise sequential."""
    get = data_config.get if hasattr(data_config, "get") else lambda k, d=None: getattr(data_config, k, d)
    shuffle = bool(get("shuffle", True))
    seed = get("seed", 0)
    return ResumableSampler(dataset, shuffle=shuffle, seed=0 if seed is None else int(seed))
