"""Karmarkar-Karp partitions, dynamic micro-batches and their inverse permutation."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from verl.utils.seqlen_balancing import (
    get_reverse_idx,
    get_seqlen_balanced_partitions,
    log_seqlen_unbalance,
    rearrange_micro_batches,
)


def _sums(lens: list[int], parts: list[list[int]]) -> list[int]:
    return sorted(sum(lens[i] for i in p) for p in parts)


def test_two_way_kk_known_result() -> None:
    # Differencing by hand: {8,7}->1, {6,5}->1, {4,1}->3, {3,1}->2: sums 16 and 14.
    lens = [8, 7, 6, 5, 4]
    parts = get_seqlen_balanced_partitions(lens, 2, equal_size=False)
    assert sorted(i for p in parts for i in p) == [0, 1, 2, 3, 4]
    assert _sums(lens, parts) == [14, 16]


def test_perfect_split_found() -> None:
    lens = [10, 10, 5, 5, 5, 5]
    parts = get_seqlen_balanced_partitions(lens, 2, equal_size=False)
    assert _sums(lens, parts) == [20, 20]


def test_equal_size_counts_and_balance() -> None:
    # Sorted in groups of 2: (1,2),(3,4),(5,6),(7,8); equal counts force 4 items each; best sums 18/18.
    lens = [1, 2, 3, 4, 5, 6, 7, 8]
    parts = get_seqlen_balanced_partitions(lens, 2, equal_size=True)
    assert [len(p) for p in parts] == [4, 4]
    assert _sums(lens, parts) == [18, 18]
    parts4 = get_seqlen_balanced_partitions(lens, 4, equal_size=True)
    assert [len(p) for p in parts4] == [2, 2, 2, 2]
    assert _sums(lens, parts4) == [9, 9, 9, 9]


def test_equal_size_needs_divisible_count() -> None:
    with pytest.raises(ValueError, match="multiple of k_partitions"):
        get_seqlen_balanced_partitions([1, 2, 3], 2, equal_size=True)


def test_reverse_idx() -> None:
    order = [2, 0, 3, 1]
    rev = get_reverse_idx(order)
    x = torch.tensor([10, 11, 12, 13])
    assert torch.equal(x[order][rev], x)
    assert rev == [1, 3, 0, 2]


def test_log_seqlen_unbalance() -> None:
    lens = [1, 1, 9, 9]
    metrics = log_seqlen_unbalance(lens, [[0, 2], [1, 3]], prefix="seqlen")
    assert metrics["seqlen/min"] == 2 and metrics["seqlen/max"] == 18 and metrics["seqlen/minmax_diff"] == 16
    assert metrics["seqlen/balanced_min"] == 10 and metrics["seqlen/balanced_max"] == 10
    assert metrics["seqlen/mean"] == 10


def _batch(lens: list[int], seqlen: int = 12) -> TensorDict:
    mask = torch.zeros(len(lens), seqlen, dtype=torch.long)
    for i, n in enumerate(lens):
        mask[i, :n] = 1
    return TensorDict({"attention_mask": mask, "row": torch.arange(len(lens))}, batch_size=[len(lens)])


def test_rearrange_respects_budget_and_restores_order() -> None:
    lens = [3, 7, 2, 5, 4, 6, 1]
    micro, parts = rearrange_micro_batches(_batch(lens), max_token_len=8)
    for mb in micro:
        assert int(mb["attention_mask"].sum()) <= 8
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(len(lens)))
    rows = torch.cat([mb["row"] for mb in micro])
    assert rows[torch.tensor(get_reverse_idx(flat))].tolist() == list(range(len(lens)))
    # 28 tokens with budget 8 need at least 4 micro-batches.
    assert len(micro) >= 4


def test_rearrange_long_sequence_alone() -> None:
    micro, parts = rearrange_micro_batches(_batch([10, 2, 2]), max_token_len=5)
    by_size = {tuple(p) for p in parts}
    assert (0,) in by_size
    for mb in micro:
        tokens = int(mb["attention_mask"].sum())
        assert tokens <= 5 or mb.batch_size[0] == 1


def test_rearrange_bad_budget() -> None:
    with pytest.raises(ValueError, match="max_token_len"):
        rearrange_micro_batches(_batch([1, 2]), max_token_len=0)
