"""Statistics of a tensor that is split across the ranks of a torch.distributed group.

Each rank holds a shard of the values (and optionally a mask); the functions here reduce the shards with
``all_reduce`` so every rank gets the same global figure. Without an initialised process group (a single process,
world size 1) they reduce the local tensor alone, with no collective, so the same call works in a unit test, a
single-GPU run and a multi-rank run. Upstream's names (``verl.utils.torch_functional`` of verl v0.9): they are
re-exported from :mod:`verl.utils.torch_functional`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def _distributed(group: Any) -> bool:
    """Whether a collective is needed: a default process group exists and the group has more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def _all_reduce(tensor: torch.Tensor, op: Any, group: Any) -> torch.Tensor:
    if _distributed(group):
        dist.all_reduce(tensor, op=op, group=group)
    return tensor


def distributed_masked_mean(local_tensor: torch.Tensor, local_mask: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Mean of the entries selected by the mask over all ranks of ``group`` (the default group when None).

    Args:
        local_tensor: this rank's values, any shape.
        local_mask: same shape (or broadcastable); non-zero selects an entry, its value is the entry's weight
            (a 0/1 mask gives the plain mean). Masked-out entries contribute nothing, even when NaN or inf.
        group: the process group; ignored when torch.distributed is not initialised (world size 1).

    Returns:
        A 0-dim tensor (``local_tensor``'s float dtype), identical on every rank:
        ``sum_r sum_i m_ri * v_ri / sum_r sum_i m_ri``; 0 when the mask selects nothing on any rank (as
        :func:`verl.utils.torch_functional.masked_mean`). One ``all_reduce`` of the pair (sum, count).
    """
    dtype = local_tensor.dtype if local_tensor.is_floating_point() else torch.float32
    values = local_tensor.to(dtype)
    mask = local_mask.to(dtype)
    selected = torch.where(local_mask.bool(), values, torch.zeros((), dtype=dtype, device=values.device))
    totals = torch.stack([(selected * mask).sum(), mask.expand_as(selected).sum()])
    totals = _all_reduce(totals, dist.ReduceOp.SUM, group)
    total, count = totals[0], totals[1]
    return torch.where(count > 0, total / count.clamp_min(torch.finfo(dtype).tiny), torch.zeros_like(total))


def distributed_mean_max_min_std(
    local_tensor: torch.Tensor,
    compute_max: bool = True,
    compute_min: bool = True,
    compute_std: bool = True,
    group: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Global mean, max, min and standard deviation of all entries of ``local_tensor`` over the ranks of ``group``.

    Args:
        local_tensor: this rank's values, any shape (every entry counts; ranks may hold different numbers).
        compute_max, compute_min, compute_std: which of the optional statistics to compute (``None`` otherwise).
        group: the process group; ignored when torch.distributed is not initialised (world size 1).

    Returns:
        ``(mean, max, min, std)``, 0-dim tensors identical on every rank, where with ``N`` the global count
        ``mean = sum(v) / N`` and ``std = sqrt(sum((v - mean)^2) / (N - 1))`` (unbiased, Bessel's correction; NaN
        when ``N == 1``). Raises ValueError when no rank holds any value.
    """
    dtype = local_tensor.dtype if local_tensor.is_floating_point() else torch.float32
    values = local_tensor.to(dtype).reshape(-1)
    totals = torch.stack([values.sum(), torch.tensor(float(values.numel()), dtype=dtype, device=values.device)])
    totals = _all_reduce(totals, dist.ReduceOp.SUM, group)
    total, count = totals[0], totals[1]
    if count.item() == 0:
        raise ValueError("distributed_mean_max_min_std: local_tensor is empty on every rank; there is no statistic")
    mean = total / count
    # an empty shard takes no part in max/min: it offers the identity of the reduction
    gmax = gmin = std = None
    if compute_max:
        local = values.max() if values.numel() else torch.tensor(-torch.inf, dtype=dtype, device=values.device)
        gmax = _all_reduce(local.clone(), dist.ReduceOp.MAX, group)
    if compute_min:
        local = values.min() if values.numel() else torch.tensor(torch.inf, dtype=dtype, device=values.device)
        gmin = _all_reduce(local.clone(), dist.ReduceOp.MIN, group)
    if compute_std:
        squares = _all_reduce((values - mean).square().sum(), dist.ReduceOp.SUM, group)
        std = torch.sqrt(squares / (count - 1))
    return mean, gmax, gmin, std
