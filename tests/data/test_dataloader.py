"""Sampler and StatefulDataLoader: seeded order, and resume mid-epoch reproduces the uninterrupted run."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from verl.data.dataloader import StatefulDataLoader
from verl.data.sampler import ResumableSampler, create_rl_sampler


class _Squares(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"x": torch.tensor([i]), "sq": i * i}


def _ids(batch: dict) -> list[int]:
    return batch["x"].view(-1).tolist()


def _loader(n: int = 10, bs: int = 3, shuffle: bool = True, seed: int = 7, **kw) -> StatefulDataLoader:
    ds = _Squares(n)
    sampler = create_rl_sampler(OmegaConf.create({"shuffle": shuffle, "seed": seed}), ds)
    return StatefulDataLoader(ds, batch_size=bs, sampler=sampler, **kw)


def test_sampler_orders():
    ds = _Squares(8)
    assert list(create_rl_sampler({"shuffle": False, "seed": 1}, ds)) == list(range(8))
    s = create_rl_sampler({"shuffle": True, "seed": 3}, ds)
    g = torch.Generator()
    g.manual_seed(3)
    assert list(s) == torch.randperm(8, generator=g).tolist()
    s.set_epoch(1)
    g.manual_seed(4)
    assert list(s) == torch.randperm(8, generator=g).tolist()
    other = ResumableSampler(ds, shuffle=True, seed=0)
    other.load_state_dict(s.state_dict())
    assert list(other) == list(s)
    with pytest.raises(ValueError, match="saved for 8 samples"):
        ResumableSampler(_Squares(9)).load_state_dict(s.state_dict())


def test_epoch_structure_and_drop_last():
    loader = _loader(n=10, bs=3)
    assert len(loader) == 3
    epoch0 = [_ids(b) for b in loader]
    epoch1 = [_ids(b) for b in loader]
    assert [len(b) for b in epoch0] == [3, 3, 3]
    assert len({i for b in epoch0 for i in b}) == 9  # one epoch: no repeats
    assert epoch0 != epoch1  # a new permutation per epoch
    keep_last = _loader(n=10, bs=3, drop_last=False, shuffle=False)
    assert [_ids(b) for b in keep_last] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    batch = next(iter(keep_last))
    assert batch["sq"].dtype == object and batch["sq"].tolist() == [0, 1, 4]


@pytest.mark.parametrize("stop_after", [0, 1, 2, 3, 4, 5])
def test_resume_matches_uninterrupted(stop_after):
    """Run k batches (crossing an epoch boundary for k >= 3), save, restore into a fresh loader: same next batches."""
    reference = _loader()
    ref_batches = [_ids(b) for _ in range(3) for b in reference]  # three epochs of 3 batches

    first = _loader()
    seen: list[list[int]] = []
    it = iter(first)
    while len(seen) < stop_after:
        try:
            seen.append(_ids(next(it)))
        except StopIteration:
            it = iter(first)
    state = first.state_dict()

    resumed = _loader(seed=999)  # the saved state carries the seed
    resumed.load_state_dict(state)
    rest: list[list[int]] = []
    while len(seen) + len(rest) < len(ref_batches):
        rest.extend(_ids(b) for b in resumed)
    assert seen + rest == ref_batches


def test_state_dict_contents_and_mismatch():
    loader = _loader()
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["batches_yielded"] == 1 and state["sampler"]["seed"] == 7
    with pytest.raises(ValueError, match="batch_size=3"):
        _loader(bs=2).load_state_dict(state)


def test_worker_processes_keep_position():
    loader = _loader(num_workers=1)
    it = iter(loader)
    first = _ids(next(it))
    assert loader.state_dict()["batches_yielded"] == 1
    del it
    resumed = _loader(num_workers=0)
    resumed.load_state_dict(loader.state_dict())
    reference = [_ids(b) for b in _loader()]
    assert [first] + [_ids(b) for b in resumed] == reference


def test_too_small_dataset():
    with pytest.raises(ValueError, match="fewer than one batch"):
        _loader(n=2, bs=3)
