"""Balance sequences by length: across data-parallel ranks, and into token-budgeted micro-batches (dynamic bsz).

Partitioning uses the Karmarkar-Karp largest differencing method generalised to k sets (Karmarkar & Karp, "The
differencing method of set partitioning", 1982; k-way variant as in Michiels et al., 2007): every item starts as
a k-tuple of partial sets, the two tuples with the largest spread (max sum - min sum) are merged by pairing the
largest set of one with the smallest set of the other, until one tuple is left.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any

import torch
from tensordict import TensorDict


class _PartitionState:
    """A k-tuple of partial sets (index lists with their sums), kept sorted by sum, largest first."""

    def __init__(self, sets: list[list[int]], sums: list[int]) -> None:
        order = sorted(range(len(sums)), key=lambda i: (-sums[i], sets[i]))
        self.sets = [sets[i] for i in order]
        self.sums = [sums[i] for i in order]

    @property
    def spread(self) -> int:
        return self.sums[0] - self.sums[-1]

    def merge(self, other: _PartitionState) -> _PartitionState:
        k = len(self.sums)
        # Largest set of one with the smallest of the other: this cancels as much of both spreads as possible.
        sets = [self.sets[i] + other.sets[k - 1 - i] for i in range(k)]
        sums = [self.sums[i] + other.sums[k - 1 - i] for i in range(k)]
        return _PartitionState(sets, sums)


def get_seqlen_balanced_partitions(seqlen_list: list[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Split item indices into ``k_partitions`` sets whose sums of ``seqlen_list`` are as equal as possible.

    Karmarkar-Karp k-way largest differencing. With ``equal_size=True`` every set gets exactly
    ``len(seqlen_list) / k_partitions`` items (the count must divide evenly): the sorted items are taken k at a
    time, one per set, so every merge keeps the counts equal.

    Args:
        seqlen_list: length (cost) of each item, e.g. valid tokens per sequence.
        k_partitions: number of sets (>= 1).
        equal_size: force equal item counts per set.

    Returns:
        ``k_partitions`` lists of item indices, each sorted ascending; the lists are ordered by their first index.
        Without ``equal_size`` a set may be empty when there are fewer items than sets.
    """
    n = len(seqlen_list)
    if k_partitions < 1:
        raise ValueError(f"k_partitions must be >= 1, got {k_partitions}")
    if equal_size and n % k_partitions != 0:
        raise ValueError(
            f"equal_size partitions need the item count ({n}) to be a multiple of k_partitions ({k_partitions})"
        )
    if any(int(s) < 0 for s in seqlen_list):
        raise ValueError(f"sequence lengths must be non-negative; got {list(seqlen_list)}")
    order = sorted(range(n), key=lambda i: (int(seqlen_list[i]), i))
    k = k_partitions
    states: list[_PartitionState] = []
    if equal_size:
        for start in range(0, n, k):
            group = order[start : start + k]
            states.append(_PartitionState([[i] for i in group], [int(seqlen_list[i]) for i in group]))
    else:
        for i in order:
            sets: list[list[int]] = [[i]] + [[] for _ in range(k - 1)]
            states.append(_PartitionState(sets, [int(seqlen_list[i])] + [0] * (k - 1)))
    if not states:
        return [[] for _ in range(k)]
    # Max-heap on spread; the counter keeps the pop order deterministic on ties.
    counter = itertools.count()
    heap = [(-s.spread, next(counter), s) for s in states]
    heapq.heapify(heap)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        merged = a.merge(b)
        heapq.heappush(heap, (-merged.spread, next(counter), merged))
    final = heap[0][2]
    partitions = [sorted(s) for s in final.sets]
    partitions.sort(key=lambda p: p[0] if p else math.inf)
    return partitions


def get_reverse_idx(idx_map: list[int]) -> list[int]:
    """Inverse permutation: ``reverse[idx_map[i]] = i``, so ``x[idx_map][reverse] == x``."""
    reverse = [0] * len(idx_map)
    for pos, idx in enumerate(idx_map):
        reverse[idx] = pos
    return reverse


def log_seqlen_unbalance(seqlen_list: list[int], partitions: list[list[int]], prefix: str) -> dict[str, float]:
    """Metrics comparing a naive contiguous split with ``partitions``.

    The naive split cuts ``seqlen_list`` into ``len(partitions)`` contiguous chunks of equal count (what the ranks
    would get without balancing). Returns ``{prefix}/min``, ``/max``, ``/minmax_diff`` (naive chunk token sums),
    ``/balanced_min``, ``/balanced_max`` (sums of ``partitions``) and ``/mean`` (total / k).
    """
    k = len(partitions)
    n = len(seqlen_list)
    if k == 0:
        raise ValueError("log_seqlen_unbalance needs at least one partition")
    chunk = math.ceil(n / k) if n else 0
    naive = [sum(seqlen_list[i * chunk : (i + 1) * chunk]) for i in range(k)]
    balanced = [sum(seqlen_list[i] for i in p) for p in partitions]
    return {
        f"{prefix}/min": float(min(naive)),
        f"{prefix}/max": float(max(naive)),
        f"{prefix}/minmax_diff": float(max(naive) - min(naive)),
        f"{prefix}/balanced_min": float(min(balanced)),
        f"{prefix}/balanced_max": float(max(balanced)),
        f"{prefix}/mean": float(sum(seqlen_list)) / k,
    }


def _sync_max(value: int, dp_group: Any | None) -> int:
    """Max of ``value`` over the ranks of ``dp_group`` (identity without torch.distributed)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return value
    backend = torch.distributed.get_backend(dp_group)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    t = torch.tensor([value], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=dp_group)
    return int(t.item())


def rearrange_micro_batches(
    batch: TensorDict,
    max_token_len: int,
    dp_group: Any | None = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
) -> tuple[list[TensorDict], list[list[int]]]:
    """Split ``batch`` into micro-batches of at most ``max_token_len`` valid tokens each (dynamic batch size).

    The valid tokens of a row are ``attention_mask.sum()``. The number of micro-batches starts at
    ``ceil(total / max_token_len)`` and grows until a Karmarkar-Karp balanced partition keeps every micro-batch
    within the budget; a sequence longer than the budget on its own forms a micro-batch by itself. With
    torch.distributed initialised and ``same_micro_num_in_dp``, the count is the maximum over ``dp_group`` so that
    every rank runs the same number of forward passes (FSDP collectives must line up).

    Args:
        batch: TensorDict with ``attention_mask`` ``[bs, seqlen]``.
        max_token_len: token budget per micro-batch.
        dp_group: process group to agree on the micro-batch count (None: the default group).
        num_batches_divided_by: round the count up to a multiple of this (e.g. pipeline stages).
        same_micro_num_in_dp: agree on the count across ranks.

    Returns:
        ``(micro_batches, indices)``: ``micro_batches[j] = batch[indices[j]]``; concatenating results in micro-batch
        order and indexing with ``get_reverse_idx(flatten(indices))`` restores the input order.
    """
    if max_token_len <= 0:
        raise ValueError(f"max_token_len must be positive, got {max_token_len}")
    if "attention_mask" not in batch.keys():
        raise KeyError(f"rearrange_micro_batches needs 'attention_mask' in the batch; keys are {list(batch.keys())}")
    seq_lens = [int(x) for x in batch["attention_mask"].sum(dim=-1).tolist()]
    n = len(seq_lens)
    if n == 0:
        raise ValueError("rearrange_micro_batches got an empty batch")
    distributed = same_micro_num_in_dp and torch.distributed.is_available() and torch.distributed.is_initialized()

    def round_up(k: int) -> int:
        if num_batches_divided_by:
            k = math.ceil(k / num_batches_divided_by) * num_batches_divided_by
        return k

    k = round_up(max(1, math.ceil(sum(seq_lens) / max_token_len)))
    while True:
        if distributed:
            k = _sync_max(k, dp_group)
        if k > n:
            raise ValueError(
                f"dynamic batch size needs {k} micro-batches (token budget {max_token_len}) but this rank has only "
                f"{n} sequences; raise the max token length or the number of sequences per rank"
            )
        # Weights of at least 1: with positive weights and k <= n, Karmarkar-Karp leaves no set empty.
        partitions = get_seqlen_balanced_partitions([max(s, 1) for s in seq_lens], k, equal_size=False)
        fits = all(len(p) == 1 or sum(seq_lens[i] for i in p) <= max_token_len for p in partitions)
        if distributed:
            # Every rank must agree on whether to try a larger count, or their loops would diverge.
            fits = _sync_max(0 if fits else 1, dp_group) == 0
        if fits:
            break
        k = round_up(k + 1)
    # Larger micro-batches first is arbitrary but deterministic; keep each micro-batch in input order.
    partitions.sort(key=lambda p: (-sum(seq_lens[i] for i in p), p[0]))
    micro_batches = [batch[torch.tensor(p, dtype=torch.long)] for p in partitions]
    return micro_batches, partitions


def ceildiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers (``b != 0``)."""
    return -(a // -b)


def roundup_divisible(a: int, b: int) -> int:
    """The smallest multiple of ``b > 0`` that is ``>= a``."""
    return ceildiv(a, b) * b


def prepare_dynamic_batch(
    data: Any,
    max_token_len: int,
    dp_group: Any | None = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
) -> tuple[list[Any], list[list[int]]]:
    """Split a ``DataProto`` into token-budgeted micro-batches (:func:`rearrange_micro_batches` on ``data.batch``).

    Each micro-batch is a ``DataProto`` with its rows of the tensors and of ``non_tensor_batch`` and a deep copy of
    ``meta_info``. Returns ``(micro_batches, indices)`` with ``indices[j]`` the rows of ``data`` in micro-batch ``j``;
    :func:`restore_dynamic_batch` puts per-row outputs back in ``data``'s order (upstream v0.9's
    ``verl.utils.seqlen_balancing.prepare_dynamic_batch``).
    """
    import copy

    batches, indices = rearrange_micro_batches(
        data.batch,
        max_token_len=max_token_len,
        dp_group=dp_group,
        num_batches_divided_by=num_batches_divided_by,
        same_micro_num_in_dp=same_micro_num_in_dp,
    )
    # type(data): the protocol lies above utils, so the micro-batches are built as the caller's own class
    micro_batches = [
        type(data)(
            batch=part,
            non_tensor_batch={key: value[rows] for key, value in data.non_tensor_batch.items()},
            meta_info=copy.deepcopy(data.meta_info),
        )
        for part, rows in zip(batches, indices, strict=True)
    ]
    return micro_batches, indices


def restore_dynamic_batch(data: torch.Tensor, batch_idx_list: list[list[int]]) -> torch.Tensor:
    """Undo :func:`prepare_dynamic_batch` on the concatenated per-micro-batch outputs ``data`` ``[bs, ...]``
    (a jagged nested tensor too): row ``i`` of the result is the output of the input's row ``i``."""
    order = list(itertools.chain.from_iterable(batch_idx_list))
    if len(order) != data.shape[0]:
        raise ValueError(f"restore_dynamic_batch: {data.shape[0]} rows for {len(order)} indices")
    reverse = get_reverse_idx(order)
    if data.is_nested:
        rows = data.unbind()
        return torch.nested.as_nested_tensor([rows[i] for i in reverse], layout=torch.jagged)
    return data[torch.tensor(reverse, dtype=torch.long, device=data.device)]


def get_group_balanced_partitions(seqlen_list: list[int], uid_list: list[Any], k_partitions: int) -> list[list[int]]:
    """Balance samples over ``k_partitions`` ranks while keeping the samples of one prompt (the same ``uid``, in
    contiguous runs as ``rollout.n`` repeats leave them) on one rank (upstream v0.9's
    ``get_group_balanced_partitions``, used with a shared-prefix forward).

    Each run of equal uids is one item of weight ``sum_i (24576 * l_i + l_i^2)`` (upstream's per-sequence transformer
    workload for a 4096-wide model); the items are split with :func:`get_seqlen_balanced_partitions` with an equal
    number of groups per partition. Returns ``k_partitions`` sorted index lists. ValueError when the lengths differ
    or there are fewer groups than partitions.
    """
    if len(seqlen_list) != len(uid_list):
        raise ValueError(f"seqlen_list has {len(seqlen_list)} entries but uid_list {len(uid_list)}")
    groups: list[list[int]] = []
    for i, uid in enumerate(uid_list):
        if groups and uid_list[groups[-1][0]] == uid:
            groups[-1].append(i)
        else:
            groups.append([i])
    if len(groups) < k_partitions:
        raise ValueError(
            f"{len(groups)} uid groups cannot fill {k_partitions} partitions; lower the world size or raise the batch"
        )
    workloads = [sum(24576 * int(seqlen_list[i]) + int(seqlen_list[i]) ** 2 for i in g) for g in groups]
    parts = get_seqlen_balanced_partitions(workloads, k_partitions, equal_size=True)
    return [sorted(i for g in part for i in groups[g]) for part in parts]
