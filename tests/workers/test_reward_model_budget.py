"""``reward_model.gpu_memory_utilization``: the scoring budget's arithmetic, by hand with a fake device total."""

from types import SimpleNamespace

import pytest
import torch

from verl.workers.reward_model_budget import (
    ScoringBudget,
    attention_bytes_per_token,
    estimated_bytes_per_token,
    measured_peak,
    module_bytes,
)


def _budget(total: int, weights: int = 300, measured: bool = False, max_rows: int = 3) -> ScoringBudget:
    # cost per token at width w: 10 (estimate) + w (width term)
    return ScoringBudget(0.5, total, weights, base_estimate=10, width_term=lambda w: w, max_rows=max_rows,
                         measured=measured)  # fmt: skip


def test_rows_fit_the_share_minus_the_weights() -> None:
    # free = 0.5 x 1000 - 300 = 200 bytes; a row of width 10 costs 10 x (10 + 10) = 200: one row per micro-batch
    assert _budget(1000).free == 200 and _budget(1000).next_rows([10] * 5, 10) == 1
    # free = 0.5 x 2000 - 300 = 700: three rows of 200 (600), not four (800)... capped at max_rows
    assert _budget(2000, max_rows=8).next_rows([10] * 5, 10) == 3
    assert _budget(10_000, max_rows=3).next_rows([10] * 5, 10) == 3  # micro_batch_size_per_gpu is never exceeded
    # packed rows cost their own tokens: 4 + 3 + 2 tokens x (10 + 10) = 180 <= 200, adding 5 more would be 280
    assert _budget(1000).next_rows([4, 3, 2, 5], 10) == 3
    with pytest.raises(ValueError, match=r"reward_model.gpu_memory_utilization=0.5: one row of 12 tokens"):
        _budget(1000).next_rows([12], 12)  # 12 x 22 = 264 > 200


def test_weights_over_the_share_fail_at_init() -> None:
    with pytest.raises(ValueError, match=r"gpu_memory_utilization=0.5: the reward model's weights take"):
        _budget(600).check_weights(torch.device("cpu"))  # 300 >= 0.5 x 600
    _budget(602).check_weights(torch.device("cpu"))


def test_a_measured_peak_replaces_the_estimate() -> None:
    budget = _budget(2000, measured=True, max_rows=8)  # free 700
    assert budget.next_rows([10] * 5, 10) == 1  # the probe: one row until a peak was measured
    budget.observe(tokens=10, width=10, peak=101)  # 10.1 bytes per token at width 10, rounded up: 11
    assert budget.cost(10) == 11 and budget.cost(4) == 11  # never below the measured rate at a shorter width
    assert budget.cost(20) == 11 + (20 - 10)  # a longer width adds its attention row
    assert budget.next_rows([10] * 8, 10) == 6  # 6 x 110 = 660 <= 700 < 770


def test_estimates_from_the_model_config() -> None:
    config = SimpleNamespace(hidden_size=8, intermediate_size=16, num_attention_heads=2)
    # 8 x hidden (fp32 residual and normed copy) + 2 bytes x (5 x hidden + 3 x intermediate)
    assert estimated_bytes_per_token(config, torch.bfloat16) == 8 * 8 + 2 * (5 * 8 + 3 * 16)
    assert estimated_bytes_per_token(config, torch.float32) == 8 * 8 + 4 * (5 * 8 + 3 * 16)
    no_intermediate = SimpleNamespace(hidden_size=8, num_attention_heads=2)
    assert estimated_bytes_per_token(no_intermediate, torch.float32) == 8 * 8 + 4 * (5 * 8 + 3 * 32)
    assert attention_bytes_per_token(config, 100) == 4 * 2 * 100
    linear = torch.nn.Linear(3, 2).to(torch.bfloat16)
    linear.register_buffer("scale", torch.zeros(5))
    assert module_bytes(linear) == (3 * 2 + 2) * 2 + 5 * 4
    out, peak = measured_peak(torch.device("cpu"), lambda: torch.ones(2))
    assert torch.equal(out, torch.ones(2)) and peak is None  # the CPU allocator reports no peak


def test_a_peak_reset_keeps_the_lifetime_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """``perf/max_memory_allocated_gb`` stays the process's lifetime peak across the budget's peak resets (CUDA's
    counters faked, so this runs on CPU)."""
    import verl.utils.device as device

    peaks = {"allocated": 700, "reserved": 900}
    monkeypatch.setattr(device, "_LIFETIME_PEAKS", {})
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda index=None: peaks["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda index=None: peaks["reserved"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda index=None: peaks.update(allocated=0, reserved=0))
    device.reset_peak_memory_stats(torch.device("cuda", 0))
    assert peaks == {"allocated": 0, "reserved": 0}
    peaks["allocated"] = 50
    assert device.lifetime_max_memory("allocated", 0) == 700 and device.lifetime_max_memory("reserved", 0) == 900
    peaks["allocated"] = 800
    assert device.lifetime_max_memory("allocated", torch.device("cuda", 0)) == 800
