"""The FLOP counter against hand counts; the peak's choice (GPU datasheet table or a probe at the model's shapes)
without timing; and a real tiny training step whose MFU against the measured peak lies in (0, 1]."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from verl.hardware import peak as peak_module
from verl.hardware.flops_counter import forward_flops, matmul_parameters, mfu, model_matmul_shapes, training_flops
from verl.hardware.peak import (
    device_peak_flops,
    gpu_table_peak,
    measure_matmul_flops,
    measure_peak_at_shapes,
    peak_flops,
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
    from verl.models.tiny import make_tiny_causal_lm

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


def test_gpu_table_matches_whole_names() -> None:
    assert gpu_table_peak("NVIDIA H100 NVL") == 835e12
    assert gpu_table_peak("NVIDIA H20") == 148e12 and gpu_table_peak("NVIDIA H200") == 989e12
    assert gpu_table_peak("NVIDIA GH200 480GB") == 989e12  # GH200, not "H200" inside it
    assert gpu_table_peak("NVIDIA L40") == 181e12 and gpu_table_peak("NVIDIA L40S") == 362e12
    assert gpu_table_peak("NVIDIA A10") == 125e12 and gpu_table_peak("NVIDIA A10G") == 70e12
    assert gpu_table_peak("NVIDIA RTX A4000") is None  # neither "A40" nor "A10" is a word of it


def test_model_matmul_shapes_by_hand() -> None:
    # hidden 8, heads 2 x head_dim 4, intermediate 16, vocab 10; 32 tokens
    assert model_matmul_shapes(_config(), 32) == [
        (32, 8, 8),  # q projection
        (32, 8, 16),  # MLP gate/up
        (32, 16, 8),  # MLP down
        (32, 8, 10),  # LM head
        (8, 32, 16),  # weight gradient of the MLP up: tokens are the inner dimension
        (8, 32, 10),  # weight gradient of the LM head
    ]
    # duplicates dropped (q projection == MLP down when intermediate == hidden)
    assert len(model_matmul_shapes(_config(intermediate_size=8), 4)) == 4


def test_probe_shape_cuts_output_features_then_rows() -> None:
    cut = peak_module._probe_shape
    assert cut((64, 32, 100), 1e9) == (64, 32, 100)  # within budget: kept
    # 2 * 4096 * 1024 * 49152 FLOPs is far over 2^34: N goes down first, to 2^34 / (2 * 4096 * 1024) = 2048
    assert cut((4096, 1024, 49152), 2.0**34) == (4096, 1024, 2048)
    # over 2^30 even at N = 2048 (N goes no lower): then M, to 2^30 / (2 * 1024 * 2048) = 256 -> not below 512
    assert cut((4096, 1024, 49152), 2.0**30) == (512, 1024, 2048)


def _fake_measure(calls: list) -> object:
    def measure(device, dtype, shapes, threads):
        calls.append((torch.device(device).type, dtype, list(shapes), threads))
        return 123e9, shapes[-1]

    return measure


def test_peak_is_the_datasheet_for_a_listed_gpu_in_bf16() -> None:
    calls: list = []
    shapes = model_matmul_shapes(_config(), 16)
    for dtype in (torch.bfloat16, torch.float16):
        peak = peak_flops("cuda", dtype, shapes, device_name="NVIDIA H100 80GB HBM3", measure=_fake_measure(calls))
        assert (peak.flops, peak.source) == (989e12, "datasheet")
        assert "datasheet 989 TFLOP/s dense" in peak.description and "H100" in peak.description
    assert calls == []  # nothing was timed


@pytest.mark.parametrize(
    ("device", "dtype", "name"),
    [
        ("cuda", torch.float32, "NVIDIA H100 80GB HBM3"),  # the table is bf16/fp16 only: fp32 is measured
        ("cuda", torch.bfloat16, "Some Unknown Accelerator"),  # not in the table
        ("cpu", torch.float32, None),
        ("cpu", torch.bfloat16, None),
    ],
)
def test_peak_is_measured_at_the_model_shapes_otherwise(device, dtype, name) -> None:
    calls: list = []
    shapes = model_matmul_shapes(_config(), 16)
    peak = peak_flops(device, dtype, shapes, threads=3, device_name=name, measure=_fake_measure(calls))
    assert (peak.flops, peak.source) == (123e9, "measured")
    assert calls == [(device, dtype, shapes, 3)]  # the model's shapes, the run's thread count
    assert peak.description.startswith("measured 123 GFLOP/s")
    assert "[16x8x8, 16x8x16, 16x16x8, 16x8x10, 8x16x16, 8x16x10]" in peak.description
    if device == "cpu":
        assert "on cpu (3 threads)" in peak.description


def test_probe_is_cached_per_device_dtype_shapes_and_threads(monkeypatch) -> None:
    timed: list = []

    def fake_time(dev, dtype, shape, repeats):
        timed.append(shape)
        return 1e-3

    monkeypatch.setattr(peak_module, "_time_matmul", fake_time)
    monkeypatch.setattr(peak_module, "_PROBE_CACHE", {})
    shapes = [(32, 8, 16), (8, 32, 10)]
    first = measure_peak_at_shapes("cpu", torch.float32, shapes, threads=1)
    assert timed == [(256, 256, 256), *shapes]  # a rough rate to size the probes, then each shape
    # best shape: (32, 8, 16) has the most FLOPs per (fake, equal) time
    assert first == (2.0 * 32 * 8 * 16 / 1e-3, (32, 8, 16))
    assert measure_peak_at_shapes("cpu", torch.float32, shapes, threads=1) == first
    assert len(timed) == 3  # cached
    measure_peak_at_shapes("cpu", torch.float32, shapes, threads=2)
    measure_peak_at_shapes("cpu", torch.bfloat16, shapes, threads=1)
    measure_peak_at_shapes("cpu", torch.float32, shapes[:1], threads=1)
    assert len(timed) == 3 + 3 + 3 + 2  # each new key probes again


def test_tiny_model_step_mfu_is_within_0_and_1() -> None:
    """A real fp32 forward + backward + AdamW step of a small Llama on the CPU, with this process's threads: its
    model FLOPs over its time and the peak measured at its own matmul shapes give an MFU in (0, 1]."""
    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm

    spec = TinyModelSpec(hidden_size=256, intermediate_size=1024, num_attention_heads=4, vocab_size=2048)
    model = make_tiny_causal_lm(spec)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rows, seq = 4, 128
    ids = torch.randint(0, 259, (rows, seq))

    def step() -> None:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    step()  # warm-up: allocation, kernel choice
    start = time.perf_counter()
    step()
    seconds = time.perf_counter() - start
    peak = peak_flops("cpu", torch.float32, model_matmul_shapes(model.config, rows * seq))
    assert peak.source == "measured" and peak.flops > 0
    value = mfu(training_flops(model.config, [seq] * rows), seconds, peak.flops)
    assert 0 < value <= 1, (value, peak.description)
