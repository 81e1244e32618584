"""The resume checks of verl/trainer/ppo/resume_check.py on a small in-memory dataset: each way a resume can skip,
replay or reorder data, or miscount steps, is named; an exact continuation passes."""

from __future__ import annotations

import copy

import pytest
import torch

from verl.data.dataloader import StatefulDataLoader
from verl.data.sampler import ResumableSampler
from verl.trainer.ppo.resume_check import (
    LEDGER_KEY,
    DataLedger,
    DataOrderError,
    StepCounterError,
    expected_position,
    verify_resume,
)

ROWS, BS = 10, 2  # 5 batches per epoch


def _dataset(offset: int = 0) -> list[dict[str, torch.Tensor]]:
    return [
        {"input_ids": torch.tensor([0, 0, 7 + i + offset, 3]), "attention_mask": torch.tensor([0, 0, 1, 1])}
        for i in range(ROWS)
    ]


def _loader(dataset=None, seed: int = 4) -> StatefulDataLoader:
    dataset = dataset if dataset is not None else _dataset()
    return StatefulDataLoader(dataset, batch_size=BS, sampler=ResumableSampler(dataset, shuffle=True, seed=seed))


def _run(batches: int, loader: StatefulDataLoader | None = None) -> tuple[dict, list[int]]:
    """Consume ``batches`` batches (one step each) as the driver does; the checkpoint state and what was seen."""
    loader = loader or _loader()
    ledger, seen, it = DataLedger(), [], iter(loader)
    for step in range(1, batches + 1):
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        ledger.record_batch(loader.last_indices, batch)
        seen.extend(loader.last_indices)
        ledger.record_step(step)
    state = {"global_steps": batches, "dataloader": loader.state_dict(), LEDGER_KEY: ledger.state_dict()}
    return state, seen


def _resumed_loader(state: dict, dataset=None) -> StatefulDataLoader:
    loader = _loader(dataset, seed=99)  # the checkpoint's sampler state wins over the new run's seed
    loader.load_state_dict(state["dataloader"])
    return loader


@pytest.mark.parametrize("batches", [3, 5, 7])  # inside an epoch, at its boundary, into the next one
def test_an_exact_continuation_passes_and_continues_the_order(batches: int) -> None:
    state, seen = _run(batches)
    loader = _resumed_loader(state)
    verify_resume(state, loader, f"/ckpt/global_step_{batches}", batches_per_step=1)
    _, full = _run(batches + 3)
    it, rest = iter(loader), []
    while len(rest) < 3 * BS:
        try:
            next(it)
        except StopIteration:
            it = iter(loader)
            continue
        rest.extend(loader.last_indices)
    assert seen + rest == full  # nothing skipped, nothing replayed


def test_a_position_ahead_or_behind_is_named() -> None:
    state, _ = _run(3)
    ahead = copy.deepcopy(state)
    ahead["dataloader"]["batches_yielded"] = 4
    with pytest.raises(DataOrderError, match="epoch 0 batch 4 .4 batches in.*3 batches .6 samples.*skip 2 samples"):
        verify_resume(ahead, _resumed_loader(ahead), "/ckpt/global_step_3", 1)
    behind = copy.deepcopy(state)
    behind["dataloader"]["batches_yielded"] = 1
    with pytest.raises(DataOrderError, match="replay 4 samples"):
        verify_resume(behind, _resumed_loader(behind), "/ckpt/global_step_3", 1)


def test_a_changed_order_and_edited_data_are_named() -> None:
    state, seen = _run(3)
    shuffled = copy.deepcopy(state)
    shuffled["dataloader"]["sampler"]["seed"] = 5  # the order the restored sampler gives is another one
    with pytest.raises(DataOrderError, match=r"sample 0 of the run .epoch 0, batch 0. was dataset row \d+, but"):
        verify_resume(shuffled, _resumed_loader(shuffled), "/ckpt/global_step_3", 1)
    edited = _dataset(offset=100)  # same row count, other prompts
    with pytest.raises(DataOrderError, match=f"dataset row {seen[-2]} holds a different prompt"):
        verify_resume(state, _resumed_loader(state, edited), "/ckpt/global_step_3", 1)


def test_step_counter_mismatches_are_named() -> None:
    state, _ = _run(3)
    with pytest.raises(StepCounterError, match="named step 4 but its training state says step 3"):
        verify_resume(state, _resumed_loader(state), "/ckpt/global_step_4", 1)
    doubled = copy.deepcopy(state)
    doubled["global_steps"] = 6  # the async double count of verl #7933
    with pytest.raises(StepCounterError, match="says 6 but 3 training steps ran"):
        verify_resume(doubled, _resumed_loader(doubled), "/ckpt/global_step_6", 1)
    with pytest.raises(DataOrderError, match=r"step 3 x 2 loader batch\(es\) per step = 6 batches.*consumed 3"):
        verify_resume(state, _resumed_loader(state), "/ckpt/global_step_3", 2)
    ledger = DataLedger()
    ledger.record_step(1)
    with pytest.raises(StepCounterError, match="from 1 to 3 in one training step .expected 2.: a step was counted"):
        ledger.record_step(3)
    with pytest.raises(StepCounterError, match="a step number repeated"):
        ledger.record_step(1)


def test_an_async_ledger_cut_back_to_the_consumed_batches() -> None:
    ledger, data = DataLedger(), _dataset()
    for b in range(4):
        rows = [2 * b, 2 * b + 1]
        ledger.record_batch(rows, {k: torch.stack([data[i][k] for i in rows]) for k in data[0]})
    cut = ledger.state_dict(batches=2)
    assert cut["indices"].tolist() == [0, 1, 2, 3] and cut["batch_sizes"].tolist() == [2, 2]
    # the fingerprints are those of the last batch kept (batch 2), not of the last one drawn
    assert (
        cut["last_fingerprints"]
        == ledger.state_dict(batches=2)["last_fingerprints"]
        != ledger.state_dict()["last_fingerprints"]
    )
    assert len(cut["last_fingerprints"]) == 2


def test_expected_position_at_an_epoch_boundary() -> None:
    assert expected_position(3, 5) == [(0, 3)]
    assert expected_position(5, 5) == [(1, 0), (0, 5)]
    assert expected_position(0, 5) == [(0, 0)]
