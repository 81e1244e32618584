"""FSDP2 in a process that runs alone (``fsdp_config.offload_policy`` on one GPU): the one-rank group is made in
process without a socket, and the sharded model computes what the plain one does. Run in a child process, so the
process group it creates never leaks into other tests. CPUOffloadPolicy itself needs CUDA: its test skips on CPU
(the GPU kit's ``cuda_tests`` runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

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
    from verl.utils.device import module_compute_device

    assert module_compute_device(sharded) == torch.device("cpu")  # DTensor shards on a CPU mesh
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
    # fsdp_config.mixed_precision.reduce_dtype (verl's key): FSDP2 reduces the gradients in that dtype
    mixed = copy.deepcopy(model)
    fsdp_utils.apply_fsdp2(mixed, mesh=fsdp_utils.single_rank_mesh(torch.device("cpu")), reduce_dtype=torch.bfloat16)
    assert mixed._get_fsdp_state()._mp_policy.reduce_dtype == torch.bfloat16
    assert sharded._get_fsdp_state()._mp_policy.reduce_dtype is None  # no policy: fp32 gradients reduced as they are
    dist.destroy_process_group()
    print("OK")
    """
)


# The GPU half: with CPUOffloadPolicy the shards stay in CPU memory while every forward computes on the GPU. The
# actor must put its micro-batches, autocast and ``dtype: auto`` on the GPU (the mesh's device), not where the shards
# are: on an H200 the 7B-shaped step failed in the log-prob gather ("index is on cpu ... cuda:0") before this.
CUDA_CHILD = textwrap.dedent(
    """
    import copy, os, sys, types
    import torch, torch.distributed as dist
    sys.path.insert(0, os.path.join(os.getcwd(), "tests", "workers", "actor"))
    from test_dp_actor import actor_config, make_data
    from verl.models.tiny import make_tiny_causal_lm
    from verl.sections.engine import FSDPConfig
    from verl.utils.device import module_compute_device
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.fsdp_setup import shard

    torch.cuda.set_device(0)
    model = make_tiny_causal_lm(seed=0)
    plain = copy.deepcopy(model).cuda()
    worker = types.SimpleNamespace(world_size=1, compute_device=torch.device("cuda", 0))
    offloaded = shard(worker, copy.deepcopy(model), FSDPConfig(offload_policy=True))
    assert next(offloaded.parameters()).device.type == "cpu"  # the shards live in CPU memory
    assert module_compute_device(offloaded) == torch.device("cuda", 0)
    data = make_data(bs=4)
    results = []
    for module in (plain, offloaded):
        opt = torch.optim.SGD(module.parameters(), lr=0.5)
        actor = DataParallelPPOActor(actor_config(), module, opt)
        old, _ = actor.compute_log_prob(data)
        data.batch["old_log_probs"] = old.cpu()
        metrics = actor.update_policy(data)
        new, _ = actor.compute_log_prob(data)
        results.append((old.cpu(), new.cpu(), metrics))
    (old_a, new_a, m_a), (old_b, new_b, m_b) = results
    torch.testing.assert_close(old_a, old_b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(new_a, new_b, atol=1e-4, rtol=1e-4)
    assert (new_a - old_a).abs().max() > 1e-4  # the update moved the policy
    assert next(offloaded.parameters()).device.type == "cpu"
    dist.destroy_process_group()
    print("OK")
    """
)


def _run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FSDP2's CPUOffloadPolicy computes on a CUDA device")
def test_offload_policy_update_on_one_gpu_matches_the_plain_model() -> None:
    proc = _run_child(CUDA_CHILD)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


def test_one_rank_fsdp2_group_in_process_trains_like_the_plain_model() -> None:
    proc = _run_child(CHILD)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-2000:]
