"""GPU-only checks of the device layer: a one-rank nccl group, CUDA memory metrics, FSDP2 on CUDA (hybrid-engine
gather), bf16 autocast training. They skip cleanly on machines without CUDA; the CPU suite covers the same code."""

from __future__ import annotations

import pytest
import torch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def nccl_group(tmp_path):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already active in this process")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/nccl_store", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@cuda
def test_device_helpers_pick_cuda_and_nccl(monkeypatch) -> None:
    from verl.utils.device import distributed_backend, get_device_name, get_torch_device

    monkeypatch.delenv("VERL_DEVICE", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert get_device_name("auto") == "cuda"
    assert get_torch_device("cuda") == torch.device("cuda", 0)
    assert distributed_backend("cuda") == "nccl"


@cuda
def test_one_rank_nccl_all_reduce(nccl_group) -> None:
    import torch.distributed as dist

    t = torch.ones(4, device="cuda")
    dist.all_reduce(t)
    assert t.device.type == "cuda" and torch.equal(t.cpu(), torch.ones(4))


@cuda
def test_cuda_memory_metrics_report_the_gpu() -> None:
    from verl.reporting.prometheus import memory_used_bytes
    from verl.trainer.ppo.metric_utils import memory_metrics

    torch.cuda.reset_peak_memory_stats()
    x = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="cuda")  # 64 MiB
    metrics = memory_metrics()
    assert "perf/max_memory_reserved_gb" in metrics
    assert metrics["perf/max_memory_allocated_gb"] >= 64 / 1024
    assert memory_used_bytes() >= x.numel()


@cuda
def test_hybrid_engine_gather_on_cuda(nccl_group) -> None:
    from torch.distributed.tensor import DTensor

    from verl.models.tiny import make_tiny_causal_lm
    from verl.utils import fsdp_utils

    model = make_tiny_causal_lm(seed=2).cuda()
    ids = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        plain = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=256)
    fsdp_utils.apply_fsdp2(model)
    owner = model.model.layers[0].mlp.up_proj
    assert isinstance(owner.weight, DTensor) and owner.weight.device.type == "cuda"
    with fsdp_utils.full_params(model), torch.no_grad():
        assert not isinstance(owner.weight, DTensor)
        greedy = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=256)
    assert isinstance(owner.weight, DTensor)
    assert torch.equal(greedy, plain)


@cuda
def test_bf16_autocast_training_step_on_cuda() -> None:
    from verl.hardware.precision import precision_for
    from verl.models.tiny import make_tiny_causal_lm
    from verl.workers.actor.micro_batching import autocast_context

    if precision_for("cuda").dtype != torch.bfloat16:
        pytest.skip("this GPU has no bf16")
    model = make_tiny_causal_lm(seed=3).cuda()
    ids = torch.randint(0, 256, (2, 8), device="cuda")
    with autocast_context(torch.device("cuda"), "auto"):
        logits = model(ids).logits
    assert logits.dtype == torch.bfloat16
    logits.float().mean().backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())  # fp32 masters
