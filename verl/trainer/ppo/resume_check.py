"""Resume continuity: the step counter and the data order of a resumed run continue the interrupted run's exactly.

Every PPO-family driver (synchronous, one-step-off, fully asynchronous; agent and LoRA runs alike) keeps a
:class:`DataLedger`: the dataset index of every prompt it consumed, in order, the number of loader batches and of
training steps, and a fingerprint (the prompt's token ids) of each sample of the last batch. The ledger is saved in
each checkpoint's ``data.pt`` (``data_ledger``) next to the data loader's position, and checked twice:

* while the run runs, each step number must be the previous one plus one (:meth:`DataLedger.record_step`): a step
  counter advanced twice for one step, the async double count of upstream verl #7933, or a resumed counter that
  starts over raises :class:`StepCounterError`;
* on resume (:func:`verify_resume`), before the first step: the checkpoint's step equals the ledger's step count
  and the ``global_step_N`` it was loaded from; the loader batches consumed match the steps (one per step
  synchronously, ``require_batches`` per step asynchronously, at least one with dynamic sampling); the restored
  loader position is exactly the one after those batches (neither ahead, which would skip samples, nor behind,
  which would replay them); the restored sampler reproduces the consumed indices in order; and the last batch's
  samples still hold the same prompts (the data files were not edited in place). Any mismatch raises
  :class:`DataOrderError` (or :class:`StepCounterError`) naming the step, the position and both values.

Both errors are :class:`~verl.utils.errors.RunHealthError` (one line, exit 1). ``trainer.verify_resume=false``
turns the resume checks off (a user who changed the data or sampler on purpose); the per-step counter check stays.
The cost: one list extend per batch, and at resume one pass over the consumed indices (0.08 s for 3 x 10^5).
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

import torch

from verl.utils.errors import RunHealthError

__all__ = [
    "DataLedger",
    "DataOrderError",
    "ResumeContinuityError",
    "StepCounterError",
    "check_step_counter",
    "expected_position",
    "sample_fingerprint",
    "verify_resume",
]

LEDGER_KEY = "data_ledger"
RECENT_BATCHES = 64  # batches whose fingerprints the ledger keeps (more than any asynchronous trainer has in flight)
_STEP_DIR = re.compile(r"global_step_(\d+)$")


class ResumeContinuityError(RunHealthError):
    """A resumed run would not continue the interrupted one exactly (its step counter or its data order)."""


class StepCounterError(ResumeContinuityError):
    """The step counter repeated, skipped or double-counted a step."""


def check_step_counter(global_steps: int, steps_run: int) -> None:
    """Before a save: the step counter must equal the training steps that ran (the ledger's count), else the
    checkpoint would resume at the wrong step (verl #7933: the counter changed outside a training step)."""
    if steps_run != global_steps:
        raise StepCounterError(
            f"saving step {global_steps}, but {steps_run} training steps ran: the step counter was changed outside "
            "a training step (verl #7933); this checkpoint would resume at the wrong step"
        )


class DataOrderError(ResumeContinuityError):
    """The data a resumed run would consume next is not what the interrupted run would have consumed next."""


def sample_fingerprint(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> str:
    """A short SHA-256 of one prompt's tokens (``input_ids`` ``[seq]``, padding excluded through
    ``attention_mask`` ``[seq]`` when given): the sample's identity independent of padding and batch."""
    ids = input_ids if attention_mask is None else input_ids[attention_mask.bool()]
    return hashlib.sha256(ids.to(torch.int64).cpu().numpy().tobytes()).hexdigest()[:16]


def _batch_fingerprints(batch: dict[str, Any]) -> list[str]:
    ids = batch.get("input_ids") if isinstance(batch, dict) else None
    if not isinstance(ids, torch.Tensor):
        return []
    mask = batch.get("attention_mask")
    return [sample_fingerprint(ids[i], mask[i] if isinstance(mask, torch.Tensor) else None) for i in range(len(ids))]


def expected_position(batches: int, per_epoch: int) -> list[tuple[int, int]]:
    """The loader positions ``(epoch, batches_yielded)`` after ``batches`` batches of ``per_epoch`` each, from a
    fresh loader: ``(b // K, b % K)``, and at an epoch boundary also ``(b // K - 1, K)`` (an epoch whose last batch
    was handed out but whose iterator was not yet drained)."""
    positions = [(batches // per_epoch, batches % per_epoch)]
    if batches > 0 and batches % per_epoch == 0:
        positions.append((batches // per_epoch - 1, per_epoch))
    return positions


class DataLedger:
    """What a run has consumed: prompt indices in order, loader batches, training steps (see the module docstring)."""

    def __init__(self) -> None:
        self.indices: list[int] = []
        self.batch_sizes: list[int] = []
        self.steps = 0
        # batch number -> its samples' fingerprints, for the last RECENT_BATCHES batches (an asynchronous trainer's
        # checkpoint ends at the oldest batch in flight, not at the last one drawn)
        self.recent_fingerprints: dict[int, list[str]] = {}

    @property
    def batches(self) -> int:
        return len(self.batch_sizes)

    def record_batch(self, indices: list[int], batch: dict[str, Any] | None = None) -> None:
        """A loader batch of dataset ``indices`` was drawn (``batch``: its collated dict, for the fingerprints)."""
        self.indices.extend(int(i) for i in indices)
        self.batch_sizes.append(len(indices))
        self.recent_fingerprints[self.batches - 1] = _batch_fingerprints(batch) if batch is not None else []
        self.recent_fingerprints.pop(self.batches - 1 - RECENT_BATCHES, None)

    def record_step(self, step: int) -> None:
        """Step ``step`` starts: it must be the step after the last one recorded (or restored from a checkpoint)."""
        if step != self.steps + 1:
            raise StepCounterError(
                f"the step counter went from {self.steps} to {step} in one training step (expected {self.steps + 1}): "
                f"{'a step was counted twice' if step > self.steps + 1 else 'a step number repeated'}; the "
                "metrics, checkpoints and learning-rate schedule would no longer line up (verl issue #7933)"
            )
        self.steps = step

    def state_dict(self, batches: int | None = None) -> dict[str, Any]:
        """The ledger as saved in ``data.pt``, cut back to the first ``batches`` loader batches when given (an
        asynchronous trainer saves only what it consumed: batches still in flight are drawn again on resume)."""
        n = self.batches if batches is None else int(batches)
        sizes = self.batch_sizes[:n]
        fingerprints = self.recent_fingerprints.get(n - 1, [])
        return {
            "indices": torch.tensor(self.indices[: sum(sizes)], dtype=torch.int64),
            "batch_sizes": torch.tensor(sizes, dtype=torch.int64),
            "steps": int(self.steps),
            "last_fingerprints": list(fingerprints),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.indices = [int(i) for i in state["indices"].tolist()]
        self.batch_sizes = [int(s) for s in state["batch_sizes"].tolist()]
        self.steps = int(state["steps"])
        self.recent_fingerprints = {self.batches - 1: list(state["last_fingerprints"])} if self.batches else {}


def _check_steps(state: dict[str, Any], ledger: dict[str, Any], path: str, batches_per_step: int | None) -> None:
    step = int(state["global_steps"])
    match = _STEP_DIR.search(os.path.basename(os.path.normpath(path)))
    if match and int(match.group(1)) != step:
        raise StepCounterError(
            f"checkpoint {path} is named step {match.group(1)} but its training state says step {step}: the step "
            "counter was saved wrong; resume from the previous checkpoint (trainer.resume_from_path)"
        )
    if int(ledger["steps"]) != step:
        raise StepCounterError(
            f"checkpoint {path}: the trainer's step counter says {step} but {int(ledger['steps'])} training steps "
            "ran (a step counted twice or not at all, verl #7933); resume from the previous checkpoint"
        )
    batches = len(ledger["batch_sizes"])
    if batches_per_step is not None and batches != step * batches_per_step:
        expected = step * batches_per_step
        what = "samples were drawn and never trained on" if batches > expected else "a step trained on no data"
        raise DataOrderError(
            f"checkpoint {path}: step {step} x {batches_per_step} loader batch(es) per step = {expected} batches, "
            f"but the checkpoint consumed {batches}: {what}"
        )
    if batches_per_step is None and batches < step:
        raise DataOrderError(f"checkpoint {path}: {step} steps trained on only {batches} loader batches")


def verify_resume(state: dict[str, Any], loader: Any, path: str, batches_per_step: int | None) -> None:
    """Check a checkpoint's driver ``state`` (``data.pt``, with :data:`LEDGER_KEY`) against the data ``loader``
    whose position was just restored from it (see the module docstring); ``path``: the checkpoint directory;
    ``batches_per_step``: loader batches one step consumes (1 synchronously, ``require_batches`` asynchronously;
    None when it varies: dynamic sampling draws until enough groups vary, at least one a step).

    Raises :class:`StepCounterError` or :class:`DataOrderError`; returns None when the resume continues exactly.
    """
    ledger = state[LEDGER_KEY]
    _check_steps(state, ledger, path, batches_per_step)
    sizes = [int(s) for s in ledger["batch_sizes"].tolist()]
    indices = ledger["indices"].tolist()
    where = f"resuming {path} at step {int(state['global_steps'])}"
    if any(s != loader.batch_size for s in sizes):
        raise DataOrderError(
            f"{where}: the checkpoint's batches hold {sorted(set(sizes))} samples, the loader's {loader.batch_size}"
        )
    per_epoch = len(loader)
    loader_state = loader.state_dict()
    position = (int(loader_state["epoch"]), int(loader_state["batches_yielded"]))
    allowed = expected_position(len(sizes), per_epoch)
    if position not in allowed:
        e, b = allowed[0]
        got = position[0] * per_epoch + position[1]
        raise DataOrderError(
            f"{where}: the saved data position is epoch {position[0]} batch {position[1]} ({got} batches in), but "
            f"{len(sizes)} batches ({len(indices)} samples) were consumed, i.e. epoch {e} batch {b}: resuming would "
            f"{'skip' if got > len(sizes) else 'replay'} {abs(got - len(sizes)) * loader.batch_size} samples"
        )
    # the restored sampler must reproduce the consumed order
    for epoch in range(-(-len(sizes) // per_epoch)):
        order = [i for batch in loader.epoch_batches(epoch) for i in batch]
        start = epoch * per_epoch * loader.batch_size
        seen = indices[start : start + len(order)]
        for offset, (had, now) in enumerate(zip(seen, order)):
            if had != now:
                pos = start + offset
                raise DataOrderError(
                    f"{where}: sample {pos} of the run (epoch {epoch}, batch {offset // loader.batch_size}) was "
                    f"dataset row {had}, but the restored data order puts row {now} there: the sampler's order changed "
                    "(data.seed / data.shuffle / the data files / torch's random permutation); the rest of the "
                    "epoch would skip some rows and repeat others"
                )
    fingerprints = ledger.get("last_fingerprints") or []
    if fingerprints and sizes:
        last = indices[-sizes[-1] :]
        for row, had in zip(last, fingerprints):
            item = loader.dataset[row]
            ids = item.get("input_ids") if isinstance(item, dict) else None
            if not isinstance(ids, torch.Tensor):  # a custom dataset without token ids: nothing to compare
                break
            mask = item.get("attention_mask")
            now = sample_fingerprint(ids, mask if isinstance(mask, torch.Tensor) else None)
            if now != had:
                raise DataOrderError(
                    f"{where}: dataset row {row} holds a different prompt than when the checkpoint was written "
                    "(the training data files changed in place); the resumed run would not continue the same data"
                )
