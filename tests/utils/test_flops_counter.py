"""The FLOP counter against hand counts, and the peak lookup."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from verl.utils.flops_counter import (
    device_peak_flops,
    forward_flops,
    gpu_table_peak,
    matmul_parameters,
    measure_matmul_flops,
    mfu,
    training_flops,
)


def _config(**kw) -> SimpleNamespace:
    base = dict(
        hidden_size=8, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=16,
        vocab_size=10,
    )  # fmt: skip
    base.update(kw)
    return SimpleNamespace(**base)


def test_matmul_parameters_by_hand() -> None:
    # per layer: q 8x8, o 8x8, k 8x4, v 8x4 (head_dim 4, one kv head) = 64+64+32+32 = 192; mlp 3x8x16 = 384
    # two layers: 1152; LM head 8x10 = 80
    assert matmul_parameters(_config()) == 1232
    # an explicit head_dim wins over hidden / heads (q, o: 8 x 2*6; k, v: 8 x 6)
    assert matmul_parameters(_config(head_dim=6)) == 2 * (96 * 2 + 48 * 2 + 384) + 80


def test_training_and_forward_flops_by_hand() -> None:
    cfg = _config()
    # 6 N s + 12 L H Q s^2 per sequence: N=1232, L=2, H=2, Q=4 -> 12*2*2*4 = 192 per s^2
    assert training_flops(cfg, [3]) == 6 * 1232 * 3 + 192 * 9
    assert training_flops(cfg, [3, 5]) == training_flops(cfg, [3]) + 6 * 1232 * 5 + 192 * 25
    assert forward_flops(cfg, [3, 5]) == pytest.approx(training_flops(cfg, [3, 5]) / 3)


def test_matches_a_real_transformers_model_parameter_count() -> None:
    """N equals the model's linear-layer weights (tiny Qwen2 with q/k/v biases: biases are not matmul work)."""
    from verl.utils.tiny_models import make_tiny_causal_lm

    model = make_tiny_causal_lm()
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert matmul_parameters(model.config) == linear


def test_gpu_table_and_probe() -> None:
    assert gpu_table_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_table_peak("NVIDIA H100 PCIe") == 756e12  # the more specific name wins
    assert gpu_table_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_table_peak("NVIDIA L40S") == 362e12
    assert gpu_table_peak("Some Unknown Accelerator") is None
    rate = measure_matmul_flops("cpu", torch.float32, size=128, repeats=2)
    assert 1e6 < rate < 1e14
    peak, source = device_peak_flops("cpu", torch.float32)
    assert source == "measured" and peak > 0
    assert mfu(50.0, 2.0, 100.0) == 0.25 and mfu(1.0, 0.0, 1.0) == 0.0
