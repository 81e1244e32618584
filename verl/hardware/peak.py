"""The device's peak FLOP/s, the denominator of MFU: a datasheet table of known GPUs, else measured.

The peak (:func:`peak_flops`) is either the *datasheet* dense bf16/fp16 tensor-core rate of a known GPU
(:data:`GPU_PEAK_BF16_TFLOPS`; verl's ``flops_counter.get_device_flops`` keeps the same kind of table) or, for any
other device or dtype (a CPU, fp32, an unlisted GPU), *measured*: the best rate of matmuls at the model's own shapes
(:func:`verl.hardware.flops_counter.model_matmul_shapes`: its projections and LM head on one micro-batch of tokens), in
the training dtype, with the run's thread count, best of a few repeats, cached per (device, dtype, shapes, threads).
A step that does these very matmuls (and smaller ones, and everything else) cannot outrun them, so a measured MFU
stays at or below 1 in practice; a fixed square probe (the old 512 x 512) runs slower than a model's large matmuls
and gave MFUs near 1. Which of the two was used is in :class:`PeakFlops` (the workers log it once and report
``perf/peak_flops``).
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "GPU_PEAK_BF16_TFLOPS",
    "PeakFlops",
    "Shape",
    "device_peak_flops",
    "gpu_table_peak",
    "measure_matmul_flops",
    "measure_peak_at_shapes",
    "peak_flops",
]

# Dense (no sparsity) bf16/fp16 tensor-core peak of known GPUs, TFLOP/s, from the vendors' data sheets.
# Matched against torch.cuda.get_device_name() by substring, most specific first.
GPU_PEAK_BF16_TFLOPS: dict[str, float] = {
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,  # SXM
    "H200": 989.0,
    "H800": 989.0,
    "H20": 148.0,
    "GH200": 989.0,
    "B200": 2250.0,
    "GB200": 2500.0,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L20": 119.5,
    "L4": 121.0,
    "A10G": 70.0,
    "A10": 125.0,
    "RTX 4090": 165.0,
    "RTX 3090": 71.0,
    "MI300X": 1307.0,
    "MI250X": 383.0,
}

Shape = tuple[int, int, int]  # (M, K, N): an [M, K] x [K, N] matmul of 2 M K N FLOPs


def gpu_table_peak(name: str) -> float | None:
    """The table's dense bf16 peak (FLOP/s) of a GPU named ``name`` (``torch.cuda.get_device_name``), or None when
    it is not listed. A key matches as a whole word of the name ("H100" in "NVIDIA H100 80GB HBM3", not "H200" in
    "NVIDIA GH200"); the longest matching key wins ("H100 PCIe" over "H100")."""
    for key in sorted(GPU_PEAK_BF16_TFLOPS, key=len, reverse=True):
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", name, flags=re.IGNORECASE):
            return GPU_PEAK_BF16_TFLOPS[key] * 1e12
    return None


# A probe multiply is cut to about this long (seconds) at the device's rough rate: cuts the output features first
# (a GEMM tiles them, so the rate holds), then the rows; never below 2048 / 512 of them.
PROBE_SECONDS = 0.1
PROBE_MAX_FLOPS = 2.0**35


def _probe_shape(shape: Shape, budget_flops: float) -> Shape:
    """``shape`` cut to about ``budget_flops``: N first (not below 2048), then M (not below 512); K is kept."""
    m, k, n = shape
    if 2.0 * m * k * n <= budget_flops:
        return shape
    n = max(min(n, 2048), int(budget_flops // (2.0 * m * k)))
    if 2.0 * m * k * n <= budget_flops:
        return (m, k, n)
    return (max(min(m, 512), int(budget_flops // (2.0 * k * n))), k, n)


def _time_matmul(dev: torch.device, dtype: torch.dtype, shape: Shape, repeats: int) -> float:
    """Best (shortest) seconds of one ``[M, K] x [K, N]`` matmul in ``dtype`` on ``dev`` over ``repeats`` timings
    after a warm-up (kernel choice, thread pool)."""
    m, k, n = shape
    # a private generator: the probe's shapes depend on the measured speed (so on the machine's load), and drawing
    # them from the global one would shift every later draw of the run by a load-dependent amount (vLLM's CPU
    # sampler draws from it: two runs of the same command sampled differently from the step after the probe)
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    a = torch.randn(m, k, device=dev, generator=gen).to(dtype)
    b = torch.randn(k, n, device=dev, generator=gen).to(dtype)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    torch.matmul(a, b)
    sync()
    inner = 10 if dev.type == "cuda" else 1  # kernels of microseconds: time several per reading
    best = math.inf
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        for _ in range(inner):
            torch.matmul(a, b)
        sync()
        best = min(best, (time.perf_counter() - start) / inner)
    return max(best, 1e-9)


_PROBE_CACHE: dict[tuple[str, torch.dtype, tuple[Shape, ...], int], tuple[float, Shape]] = {}


def measure_peak_at_shapes(
    device: torch.device | str,
    dtype: torch.dtype,
    shapes: Sequence[Shape],
    threads: int | None = None,
    repeats: int = 3,
) -> tuple[float, Shape]:
    """``(FLOP/s, shape)``: the best rate of a matmul at any of ``shapes`` (``(M, K, N)``) in ``dtype`` on
    ``device``, best of ``repeats`` timings each, and the (possibly cut, see :data:`PROBE_SECONDS`) shape that
    reached it. Runs with the current torch thread count (``threads``: the count to record in the cache key,
    default ``torch.get_num_threads()``); cached per (device, dtype, shapes, threads) in this process."""
    dev = torch.device(device)
    threads = int(threads or torch.get_num_threads())
    key = (str(dev), dtype, tuple(tuple(int(x) for x in s) for s in shapes), threads)
    if key in _PROBE_CACHE:
        return _PROBE_CACHE[key]
    # the device's rough rate sizes the probes: a fast device gets the full shapes, a slow one (bf16 emulated on
    # an AVX2 CPU: well under 1 GFLOP/s) cut ones, so the whole probe stays around a second
    rough = 2.0 * 256**3 / _time_matmul(dev, dtype, (256, 256, 256), 2)
    budget = min(max(rough * PROBE_SECONDS, 1e8), PROBE_MAX_FLOPS)
    best: tuple[float, Shape] = (0.0, (0, 0, 0))
    for shape in key[2]:
        probe = _probe_shape(shape, budget)
        rate = 2.0 * probe[0] * probe[1] * probe[2] / _time_matmul(dev, dtype, probe, repeats)
        if rate > best[0]:
            best = (rate, probe)
    _PROBE_CACHE[key] = best
    return best


@functools.cache
def measure_matmul_flops(device: str, dtype: torch.dtype, size: int | None = None, repeats: int = 5) -> float:
    """Achieved FLOP/s of a square matmul in ``dtype`` on ``device`` (best of ``repeats``; cached per process).

    ``size`` defaults to 4096 on GPUs and 512 on CPUs. A square probe says little about a model's own matmuls
    (MFU uses :func:`measure_peak_at_shapes`); kept as a quick device check.
    """
    dev = torch.device(device)
    n = size or (4096 if dev.type == "cuda" else 512)
    return 2.0 * n**3 / _time_matmul(dev, dtype, (n, n, n), repeats)


@dataclass(frozen=True)
class PeakFlops:
    """The peak FLOP/s that MFU divides by, and where it came from.

    Attributes:
        flops: FLOP/s.
        source: ``"datasheet"`` (the GPU table) or ``"measured"`` (matmuls at the model's shapes).
        description: one line saying which, for the log.
    """

    flops: float
    source: str
    description: str


_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _rate(flops: float) -> str:
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops / 1e6:.3g} MFLOP/s"


def peak_flops(
    device: torch.device | str,
    dtype: torch.dtype,
    shapes: Sequence[Shape] | None = None,
    threads: int | None = None,
    device_name: str | None = None,
    measure: Callable[..., tuple[float, Shape]] = measure_peak_at_shapes,
) -> PeakFlops:
    """The peak for MFU of ``dtype`` on ``device``: the datasheet rate when the device is a GPU in
    :data:`GPU_PEAK_BF16_TFLOPS` and ``dtype`` is bf16/fp16 (the table's rate; tensor cores), else measured by
    ``measure`` (default :func:`measure_peak_at_shapes`) at ``shapes`` (the model's, :func:`model_matmul_shapes`;
    default one 2048-cube).

    ``device_name`` overrides ``torch.cuda.get_device_name`` (tests); ``threads`` defaults to the current torch
    thread count (it matters on CPUs only).
    """
    dev = torch.device(device)
    dname = _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))
    if dev.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        name = device_name or torch.cuda.get_device_name(dev)
        table = gpu_table_peak(name)
        if table is not None:
            return PeakFlops(table, "datasheet", f"datasheet {_rate(table)} dense {dname} of {name}")
    shapes = list(shapes or [(2048, 2048, 2048)])
    threads = int(threads or torch.get_num_threads())
    rate, shape = measure(dev, dtype, shapes, threads)
    where = f"cpu ({threads} thread{'s' if threads > 1 else ''})" if dev.type == "cpu" else (device_name or str(dev))
    listed = ", ".join(f"{m}x{k}x{n}" for m, k, n in shapes)
    return PeakFlops(
        rate,
        "measured",
        f"measured {_rate(rate)} {dname} at the model's matmul shapes (MxKxN) [{listed}] on {where}, best at "
        f"{shape[0]}x{shape[1]}x{shape[2]}",
    )


def device_peak_flops(device: torch.device | str, dtype: torch.dtype) -> tuple[float, str]:
    """``(peak FLOP/s, source)`` of :func:`peak_flops` without model shapes (one 2048-cube probe); ``source`` is
    ``"table:<name>"`` or ``"measured"``."""
    peak = peak_flops(device, dtype)
    if peak.source == "datasheet":
        return peak.flops, "table:" + torch.cuda.get_device_name(torch.device(device))
    return peak.flops, "measured"
