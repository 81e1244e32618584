"""verl.utils.distributed_stats: world size 1 (no process group) and a 2-rank gloo group, against hand-computed
figures."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from verl.utils import torch_functional as verl_F
from verl.utils.distributed_stats import distributed_masked_mean, distributed_mean_max_min_std


def test_reexported_from_torch_functional() -> None:
    assert verl_F.distributed_masked_mean is distributed_masked_mean
    assert verl_F.distributed_mean_max_min_std is distributed_mean_max_min_std


def test_masked_mean_world_size_one_by_hand() -> None:
    # no group, or the 1-rank group an in-process vLLM engine of an earlier test in this process keeps
    assert not dist.is_initialized() or dist.get_world_size() == 1
    # entries 1 and 4 selected; the NaN is masked out and must not leak: (1 + 4) / 2
    out = distributed_masked_mean(torch.tensor([1.0, 2.0, float("nan"), 4.0]), torch.tensor([1, 0, 0, 1]))
    assert out.dim() == 0 and out.item() == 2.5
    # a weighted mask: (2 * 1 + 1 * 4) / (2 + 1) = 2
    out = distributed_masked_mean(torch.tensor([1.0, 4.0, 7.0]), torch.tensor([2.0, 1.0, 0.0]))
    assert out.item() == pytest.approx(2.0)
    # 2-D, integer values: (1 + 3 + 6) / 3
    out = distributed_masked_mean(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[1, 0, 1], [0, 0, 1]]))
    assert out.dtype == torch.float32 and out.item() == pytest.approx(10 / 3)
    # a mask selecting nothing gives 0, as masked_mean
    assert distributed_masked_mean(torch.tensor([1.0, 2.0]), torch.tensor([0, 0])).item() == 0.0


def test_mean_max_min_std_world_size_one_by_hand() -> None:
    mean, gmax, gmin, std = distributed_mean_max_min_std(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    # mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5 over N - 1 = 3
    assert (mean.item(), gmax.item(), gmin.item()) == (2.5, 4.0, 1.0)
    assert std.item() == pytest.approx(math.sqrt(5 / 3))
    mean, gmax, gmin, std = distributed_mean_max_min_std(torch.tensor([5.0, 7.0]), False, False, False)
    assert mean.item() == 6.0 and gmax is None and gmin is None and std is None
    with pytest.raises(ValueError, match="empty on every rank"):
        distributed_mean_max_min_std(torch.empty(0))


def _two_ranks(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        # rank r holds [2r + 1, 2r + 2]; rank 0 selects its first, rank 1 its second: values 1 and 4
        local = torch.tensor([2.0 * rank + 1, 2.0 * rank + 2])
        mask = torch.tensor([1.0, 0.0]) if rank == 0 else torch.tensor([0.0, 1.0])
        masked = distributed_masked_mean(local, mask).item()
        # rank 0 holds [1], rank 1 holds [2, 3]: N = 3, mean 2, squared deviations 1 + 0 + 1 over 2
        shard = torch.tensor([1.0]) if rank == 0 else torch.tensor([2.0, 3.0])
        stats = [t.item() for t in distributed_mean_max_min_std(shard)]
        torch.save((masked, stats), os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_agree_on_the_global_figures(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    # fork: the ranks start in well under a second (spawn re-imports torch in each); but a forked child would
    # inherit a process group this process holds (an in-process vLLM engine keeps one), so then spawn
    start_method = "spawn" if dist.is_initialized() else "fork"
    mp.start_processes(
        _two_ranks, args=(2, str(tmp_path / "rdzv"), str(tmp_path)), nprocs=2, join=True, start_method=start_method
    )
    for rank in (0, 1):
        masked, (mean, gmax, gmin, std) = torch.load(tmp_path / f"rank{rank}.pt")
        assert masked == 2.5
        assert (mean, gmax, gmin) == (2.0, 3.0, 1.0)
        assert std == pytest.approx(1.0)
