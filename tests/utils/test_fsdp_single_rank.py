"""FSDP2 in a process that runs alone (``fsdp_config.offload_policy`` on one GPU): the one-rank group is made in
process without a socket, and the sharded model computes what the plain one does. Run in a child process, so the
process group it creates never leaks into other tests (CPUOffloadPolicy itself needs CUDA: the GPU kit runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import copy, types
    import torch, torch.distributed as dist
    from verl.models.tiny import make_tiny_causal_lm
    from verl.sections.engine import FSDPConfig
    from verl.utils import fsdp_utils
    from verl.workers.fsdp_setup import shard

    model = make_tiny_causal_lm(seed=0)
    worker = types.SimpleNamespace(world_size=1, compute_device=torch.device("cpu"))
    # on CPU the key changes nothing (the parameters already live in CPU memory) and no group is made
    assert shard(worker, model, FSDPConfig(offload_policy=True)) is model and not dist.is_initialized()
    sharded = copy.deepcopy(model)
    fsdp_utils.apply_fsdp2(sharded, mesh=fsdp_utils.single_rank_mesh(torch.device("cpu")))
    assert dist.get_world_size() == 1 and fsdp_utils.is_fsdp_module(sharded)
    assert fsdp_utils.single_rank_mesh(torch.device("cpu")).size() == 1  # the existing group is reused
    ids = torch.randint(0, 250, (2, 9))
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, sharded)]
    for _ in range(2):
        losses = []
        for m, opt in zip((model, sharded), opts):
            loss = m(input_ids=ids).logits.float().logsumexp(-1).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss))
        assert abs(losses[0] - losses[1]) < 1e-5, losses
    with fsdp_utils.full_params(sharded):
        after = {n: p.detach().clone() for n, p in sharded.named_parameters()}
    for name, p in model.named_parameters():
        torch.testing.assert_close(after[name], p.detach(), atol=1e-5, rtol=1e-5)
    dist.destroy_process_group()
    print("OK")
    """
)


def test_one_rank_fsdp2_group_in_process_trains_like_the_plain_model() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-2000:]
