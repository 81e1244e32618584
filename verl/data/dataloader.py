"""A data loader whose position (epoch + batches consumed) is saved in checkpoints and restored on resume."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from verl.data.rl_dataset import collate_fn as default_collate_fn
from verl.data.sampler import ResumableSampler


class StatefulDataLoader:
    """Iterate a dataset in batches; ``state_dict()`` records ``{"epoch", "batches_yielded", "sampler"}``.

    Each ``iter()`` runs (the rest of) one epoch and then advances the epoch. After ``load_state_dict`` the next
    ``iter()`` continues the saved epoch right after the last batch the consumer received, so a resumed run sees
    exactly the batches an uninterrupted run would have seen. Position counts batches handed to the consumer,
    so worker prefetching (``num_workers > 0``) does not shift it.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        sampler: ResumableSampler | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        drop_last: bool = True,
        num_workers: int = 0,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.sampler = sampler or ResumableSampler(dataset, shuffle=False)
        self.collate_fn = collate_fn or default_collate_fn
        self.drop_last = drop_last
        self.num_workers = int(num_workers)
        self._batches_yielded = 0
        # dataset indices of the batch handed out last (the data ledger of a run records them: resume_check.py)
        self.last_indices: list[int] = []
        if len(self) == 0:
            raise ValueError(
                f"the dataset has {len(dataset)} samples, fewer than one batch of {batch_size} (drop_last={drop_last})"
            )

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    @property
    def epoch(self) -> int:
        """The epoch the next batch comes from."""
        return self.sampler.epoch

    def _epoch_batches(self, epoch: int | None = None) -> list[list[int]]:
        order = self.sampler.indices(epoch)
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """The dataset indices of every batch of ``epoch`` (``len(self)`` batches of ``batch_size``), in the order
        the loader hands them out: a pure function of the sampler's state and ``epoch``."""
        return self._epoch_batches(epoch)

    def __iter__(self) -> Iterator[Any]:
        remaining = self._epoch_batches()[self._batches_yielded :]
        if self.num_workers > 0:
            loader = torch.utils.data.DataLoader(
                self.dataset, batch_sampler=remaining, collate_fn=self.collate_fn, num_workers=self.num_workers
            )
            source: Iterator[Any] = iter(loader)
        else:
            source = (self.collate_fn([self.dataset[i] for i in idx]) for idx in remaining)
        for position, batch in enumerate(source):
            self.last_indices = list(remaining[position])
            self._batches_yielded += 1
            yield batch
        # The epoch is over only when the consumer drained it; a break leaves the position where it stopped.
        self.sampler.set_epoch(self.sampler.epoch + 1)
        self._batches_yielded = 0

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "batches_yielded", "batch_size", "sampler"}``: where the next batch starts."""
        return {
            "epoch": self.sampler.epoch,
            "batches_yielded": self._batches_yielded,
            "batch_size": self.batch_size,
            "sampler": self.sampler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the position saved by ``state_dict``; the next ``iter()`` continues from there."""
        if int(state.get("batch_size", self.batch_size)) != self.batch_size:
            raise ValueError(
                f"dataloader state was saved with batch_size={state['batch_size']} but this loader uses "
                f"{self.batch_size}; resuming would change the data order"
            )
        self.sampler.load_state_dict(state["sampler"])
        self.sampler.set_epoch(int(state["epoch"]))
        self._batches_yielded = int(state["batches_yielded"])
        if not 0 <= self._batches_yielded <= len(self):
            raise ValueError(f"dataloader state batches_yielded={self._batches_yielded} is outside 0..{len(self)}")
