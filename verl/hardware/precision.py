"""Which compute dtype a device should use: the one place that decides what ``dtype: auto`` means.

bf16 pays only where the device multiplies bf16 natively: CUDA devices with bf16 support (Ampere and newer), and
CPUs with AMX tiles or AVX512-BF16 that oneDNN is allowed to use. Elsewhere (AVX2-only x86 such as most AMD
Zen 2/3 and Intel client chips, or AVX-512 without the BF16 extension) ATen falls back to a generic GEMM for bf16
that runs one to three orders of magnitude slower than fp32, so ``auto`` picks float32 there.

The decision is made from what torch reports (``torch.cpu._is_amx_tile_supported``,
``torch.cpu._is_avx512_bf16_supported``, ``torch.ops.mkldnn._is_mkldnn_bf16_supported`` — the last one honours
``DNNL_MAX_CPU_ISA`` — and ``torch.cuda.is_bf16_supported``), is logged once per device kind with its reason, and an
explicit ``bfloat16`` on a CPU without native support still runs but warns once with the measured slowdown.
"""

from __future__ import annotations

import logging
import platform
import time
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

_DTYPE_NAMES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
}
DTYPE_CHOICES = ("auto", "bfloat16", "float16", "float32")


@dataclass(frozen=True)
class CpuBf16Features:
    """What torch reports about bf16 matmul support on this CPU (separate so tests can mock any machine)."""

    capability: str  # torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, DEFAULT, SVE256, ...
    amx: bool  # AMX tiles (Sapphire Rapids and newer)
    avx512_bf16: bool  # AVX512-BF16 instructions (Cooper Lake, Zen 4 and newer)
    onednn_bf16: bool  # oneDNN will run bf16 kernels (False when DNNL_MAX_CPU_ISA caps it below AVX-512)
    machine: str = "x86_64"  # platform.machine()
    arm_bf16: bool = False  # aarch64 BF16 extension (Graviton 3, Neoverse V1/N2 ...)

    @classmethod
    def detect(cls) -> CpuBf16Features:
        """Read the features of the CPU this process runs on."""
        cpu = getattr(torch, "cpu", None)

        def flag(name: str) -> bool:
            fn = getattr(cpu, name, None)
            try:
                return bool(fn()) if fn is not None else False
            except Exception:  # noqa: BLE001 - an unsupported probe means "no"
                return False

        try:
            onednn = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except Exception:  # noqa: BLE001
            onednn = False
        machine = platform.machine().lower()
        arm_bf16 = False
        if machine in ("aarch64", "arm64"):
            arm_bf16 = _proc_cpuinfo_has("bf16")
        return cls(
            capability=str(torch.backends.cpu.get_cpu_capability()),
            amx=flag("_is_amx_tile_supported"),
            avx512_bf16=flag("_is_avx512_bf16_supported"),
            onednn_bf16=onednn,
            machine=machine,
            arm_bf16=arm_bf16,
        )


def _proc_cpuinfo_has(feature: str) -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(line.startswith("Features") and feature in line.split() for line in f)
    except OSError:
        return False


@dataclass(frozen=True)
class PrecisionChoice:
    """The compute dtype ``auto`` resolves to on one device, and why."""

    dtype: torch.dtype
    native_bf16: bool
    reason: str

    @property
    def name(self) -> str:
        return {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[self.dtype]


def cpu_precision(features: CpuBf16Features) -> PrecisionChoice:
    """``auto`` on a CPU: bfloat16 with AMX or AVX512-BF16 that oneDNN may use (or aarch64 BF16), else float32."""
    if features.machine in ("aarch64", "arm64"):
        if features.arm_bf16 and features.onednn_bf16:
            return PrecisionChoice(torch.bfloat16, True, "CPU with native bf16 matmul (aarch64 BF16): bfloat16")
        return PrecisionChoice(torch.float32, False, "CPU without native bf16 matmul (aarch64): float32")
    if features.amx or features.avx512_bf16:
        kind = "AMX" if features.amx else "AVX512-BF16"
        if features.onednn_bf16:
            return PrecisionChoice(torch.bfloat16, True, f"CPU with native bf16 matmul ({kind}): bfloat16")
        return PrecisionChoice(
            torch.float32,
            False,
            f"CPU has {kind} but oneDNN is limited below it (DNNL_MAX_CPU_ISA), no native bf16 matmul: float32",
        )
    return PrecisionChoice(torch.float32, False, f"CPU without native bf16 matmul ({features.capability}): float32")


def cuda_precision(device: torch.device) -> PrecisionChoice:
    """``auto`` on a CUDA device: bfloat16 where the device supports it (compute capability >= 8.0), else float32."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    name = torch.cuda.get_device_name(index)
    major, minor = torch.cuda.get_device_capability(index)
    if major >= 8:
        return PrecisionChoice(torch.bfloat16, True, f"CUDA device {name} (sm_{major}{minor}) with bf16: bfloat16")
    return PrecisionChoice(torch.float32, False, f"CUDA device {name} (sm_{major}{minor}) without bf16: float32")


_CHOICES: dict[str, PrecisionChoice] = {}
_WARNED: set[str] = set()


def _device_of(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device("cpu")
    return device if isinstance(device, torch.device) else torch.device(device)


def precision_for(device: torch.device | str | None = None) -> PrecisionChoice:
    """What ``dtype: auto`` means on ``device`` (default CPU); decided once per device type and logged once."""
    dev = _device_of(device)
    if dev.type not in _CHOICES:
        if dev.type == "cuda":
            choice = cuda_precision(dev)
        elif dev.type == "cpu":
            choice = cpu_precision(CpuBf16Features.detect())
        else:  # other accelerators (mps, xpu, ...): fp32 is always correct
            choice = PrecisionChoice(torch.float32, False, f"{dev.type} device: float32")
        _CHOICES[dev.type] = choice
        logger.info("dtype=auto: %s", choice.reason)
    return _CHOICES[dev.type]


def measure_bf16_slowdown(size: int = 96, repeats: int = 3) -> float:
    """How many times slower a ``[size, size] @ [size, size]`` matmul is in bf16 than in fp32 on this CPU."""

    def best(dtype: torch.dtype) -> float:
        a = torch.randn(size, size).to(dtype)
        b = torch.randn(size, size).to(dtype)
        a @ b
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        return min(times)

    return best(torch.bfloat16) / max(best(torch.float32), 1e-9)


def resolve_dtype(name: str, device: torch.device | str | None = None) -> torch.dtype:
    """Map a config dtype name to torch: ``auto`` through :func:`precision_for`, or an explicit name.

    Accepted: ``auto``, ``bfloat16``/``bf16``, ``float16``/``fp16``, ``float32``/``fp32``. An explicit bf16 on a CPU
    without native bf16 matmul is honoured but warned about once, with the slowdown measured on this machine.
    """
    name = str(name)
    if name == "auto":
        return precision_for(device).dtype
    if name not in _DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted([*_DTYPE_NAMES, 'auto'])}")
    dtype = _DTYPE_NAMES[name]
    dev = _device_of(device)
    if dtype == torch.bfloat16 and dev.type == "cpu" and "cpu-bf16" not in _WARNED:
        choice = precision_for(dev)
        if not choice.native_bf16:
            _WARNED.add("cpu-bf16")
            logger.warning(
                "dtype=bfloat16 on a %s: bf16 matmuls measured %.0fx slower than float32 here; "
                "set dtype=auto (or float32) unless you need bf16 numerics",
                choice.reason.rsplit(":", 1)[0],
                measure_bf16_slowdown(),
            )
    return dtype


def resolve_dtype_name(name: str, device: torch.device | str | None = None) -> str:
    """:func:`resolve_dtype` as a name (``bfloat16``/``float16``/``float32``), for engines configured by string."""
    dtype = resolve_dtype(name, device)
    return {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype]
