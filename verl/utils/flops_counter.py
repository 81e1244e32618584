"""Model FLOPs of a decoder-only transformer and the device's peak rate: the two halves of MFU.

Model FLOPs utilisation (MFU, Chowdhery et al. 2022, "PaLM", appendix B) is the rate of the FLOPs the model needs
(not counting recomputation) over the device's peak. For one token in a sequence of ``T`` tokens, training (forward
+ backward) needs

    6 N + 12 L H Q T

FLOPs: ``N`` matmul parameters (every linear layer, the LM head included; an embedding lookup is no matmul), each
used in one multiply-add forward and two backward (Kaplan et al. 2020: ``C ~ 6N``), plus the attention scores and
the weighted sum (``L`` layers, ``H`` query heads of size ``Q``: ``2 x 2 L H Q T`` forward, three times that with
the backward). The attention term counts the full ``T x T`` square as PaLM and verl's ``FlopsCounter`` do. A
forward pass alone (log-probs) is one third of this.

The peak comes from a table of known GPUs (dense bf16/fp16 tensor-core rate from the vendors' data sheets) or, for
any other device or dtype (a CPU, fp32), from a short matmul probe run once per process and cached.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Iterable
from typing import Any

import torch

# Dense (no sparsity) bf16/fp16 tensor-core peak of known GPUs, TFLOP/s, from the vendors' data sheets.
# Matched against torch.cuda.get_device_name() by substring, most specific first.
GPU_PEAK_BF16_TFLOPS: dict[str, float] = {
    "H100 PCIe": 756.0,
    "H100": 989.0,  # SXM
    "H200": 989.0,
    "H800": 989.0,
    "H20": 148.0,
    "GH200": 989.0,
    "B200": 2250.0,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L4": 121.0,
    "A10G": 70.0,
    "A10": 125.0,
    "RTX 4090": 165.0,
    "RTX 3090": 71.0,
    "MI300X": 1307.0,
    "MI250X": 383.0,
}


def _get(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def matmul_parameters(config: Any) -> int:
    """``N``: the parameters of every linear layer of a Llama/Qwen2/Mistral-style decoder (gated MLP) and its LM
    head, from a transformers config (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``num_key_value_heads``, ``head_dim``, ``intermediate_size``, ``vocab_size``). Biases are left out."""
    hidden = int(config.hidden_size)
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    kv_heads = int(_get(config, "num_key_value_heads", default=heads))
    head_dim = int(_get(config, "head_dim", default=hidden // heads))
    inter = int(_get(config, "intermediate_size", default=4 * hidden))
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o; k, v
    mlp = 3 * hidden * inter  # gate, up, down
    return layers * (attention + mlp) + hidden * int(config.vocab_size)


def training_flops(config: Any, seq_lens: Iterable[int]) -> float:
    """FLOPs of one forward + backward over sequences of the given lengths: ``sum_s (6 N s + 12 L H Q s^2)``."""
    n = matmul_parameters(config)
    heads = int(config.num_attention_heads)
    head_dim = int(_get(config, "head_dim", default=int(config.hidden_size) // heads))
    attn = 12 * int(config.num_hidden_layers) * heads * head_dim
    lens = [int(s) for s in seq_lens]
    return float(sum(6 * n * s + attn * s * s for s in lens))


def forward_flops(config: Any, seq_lens: Iterable[int]) -> float:
    """FLOPs of a forward pass only (log-probs, reference): a third of :func:`training_flops`."""
    return training_flops(config, seq_lens) / 3.0


def gpu_table_peak(name: str) -> float | None:
    """The table's dense bf16 peak (FLOP/s) of a GPU named ``name``, or None when it is not listed."""
    for key in sorted(GPU_PEAK_BF16_TFLOPS, key=len, reverse=True):
        if key.lower() in name.lower():
            return GPU_PEAK_BF16_TFLOPS[key] * 1e12
    return None


@functools.cache
def measure_matmul_flops(device: str, dtype: torch.dtype, size: int | None = None, repeats: int = 5) -> float:
    """Achieved FLOP/s of a square matmul in ``dtype`` on ``device`` (median of ``repeats``; cached per process).

    ``size`` defaults to 4096 on GPUs and 512 on CPUs (a probe of well under a second with one thread).
    """
    dev = torch.device(device)
    n = size or (4096 if dev.type == "cuda" else 512)
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    torch.matmul(a, b)  # warm-up: kernel selection, thread pool
    sync()
    times = []
    inner = 10 if dev.type == "cuda" else 1
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            torch.matmul(a, b)
        sync()
        times.append((time.perf_counter() - start) / inner)
    return 2.0 * n**3 / statistics.median(times)


def device_peak_flops(device: torch.device | str, dtype: torch.dtype) -> tuple[float, str]:
    """``(peak FLOP/s, source)`` for ``dtype`` on ``device``: the GPU table for bf16/fp16 on a listed GPU, else a
    matmul probe (``source`` says which: ``"table:<name>"`` or ``"measured"``)."""
    dev = torch.device(device)
    if dev.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        name = torch.cuda.get_device_name(dev)
        peak = gpu_table_peak(name)
        if peak is not None:
            return peak, f"table:{name}"
    return measure_matmul_flops(str(dev), dtype), "measured"


def mfu(flops: float, seconds: float, peak_flops: float, n_devices: int = 1) -> float:
    """Model FLOPs utilisation: ``flops / (seconds * peak_flops * n_devices)`` (0 when nothing was timed)."""
    if seconds <= 0 or peak_flops <= 0:
        return 0.0
    return flops / (seconds * peak_flops * max(n_devices, 1))
