"""dtype=auto: one decision per device capability (mocked), logged once; explicit bf16 on a slow CPU warns once."""

from __future__ import annotations

import logging

import pytest
import torch

from verl.hardware import precision
from verl.hardware.precision import (
    CpuBf16Features,
    cpu_precision,
    precision_for,
    resolve_dtype,
    resolve_dtype_name,
)


def features(**kw) -> CpuBf16Features:
    base = dict(capability="AVX2", amx=False, avx512_bf16=False, onednn_bf16=False, machine="x86_64")
    base.update(kw)
    return CpuBf16Features(**base)


@pytest.mark.parametrize(
    ("feat", "dtype", "reason_part"),
    [
        (features(), torch.float32, "without native bf16 matmul (AVX2)"),
        (features(capability="AVX512", onednn_bf16=True), torch.float32, "without native bf16 matmul (AVX512)"),
        (features(capability="AVX512", avx512_bf16=True, onednn_bf16=True), torch.bfloat16, "AVX512-BF16"),
        (features(capability="AVX512", amx=True, avx512_bf16=True, onednn_bf16=True), torch.bfloat16, "AMX"),
        # DNNL_MAX_CPU_ISA=AVX2 on an AMX machine: oneDNN will not use the bf16 units
        (features(capability="AVX2", amx=True, avx512_bf16=True, onednn_bf16=False), torch.float32, "DNNL_MAX_CPU_ISA"),
        (features(capability="DEFAULT", machine="aarch64", arm_bf16=True, onednn_bf16=True), torch.bfloat16, "aarch64"),
        (features(capability="DEFAULT", machine="aarch64"), torch.float32, "aarch64"),
    ],
)
def test_cpu_decision_for_each_capability(feat: CpuBf16Features, dtype: torch.dtype, reason_part: str) -> None:
    choice = cpu_precision(feat)
    assert choice.dtype == dtype
    assert choice.native_bf16 == (dtype == torch.bfloat16)
    assert reason_part in choice.reason
    assert choice.reason.endswith(choice.name)


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(precision, "_CHOICES", {})
    monkeypatch.setattr(precision, "_WARNED", set())


def test_auto_is_decided_and_logged_once_per_device(fresh_cache, monkeypatch, caplog) -> None:
    calls = []

    def fake_detect(cls=None):
        calls.append(1)
        return features()

    monkeypatch.setattr(CpuBf16Features, "detect", classmethod(lambda cls: fake_detect()))
    with caplog.at_level(logging.INFO, logger="verl.hardware.precision"):
        assert resolve_dtype("auto", "cpu") == torch.float32
        assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
        assert resolve_dtype_name("auto") == "float32"
    assert len(calls) == 1
    messages = [r.getMessage() for r in caplog.records if "dtype=auto" in r.getMessage()]
    assert messages == ["dtype=auto: CPU without native bf16 matmul (AVX2): float32"]


def test_explicit_bf16_on_slow_cpu_warns_once_with_measured_slowdown(fresh_cache, monkeypatch, caplog) -> None:
    monkeypatch.setattr(CpuBf16Features, "detect", classmethod(lambda cls: features()))
    monkeypatch.setattr(precision, "measure_bf16_slowdown", lambda: 85.0)
    with caplog.at_level(logging.WARNING, logger="verl.hardware.precision"):
        assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16  # honoured, not overridden
        assert resolve_dtype("bf16", "cpu") == torch.bfloat16
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "85x slower than float32" in warnings[0]


def test_explicit_bf16_on_native_cpu_does_not_warn(fresh_cache, monkeypatch, caplog) -> None:
    monkeypatch.setattr(
        CpuBf16Features, "detect", classmethod(lambda cls: features(capability="AVX512", amx=True, onednn_bf16=True))
    )
    with caplog.at_level(logging.WARNING, logger="verl.hardware.precision"):
        assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16
        assert resolve_dtype("auto", "cpu") == torch.bfloat16
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_explicit_names_and_errors() -> None:
    assert resolve_dtype("float32") == torch.float32
    assert resolve_dtype("fp16") == torch.float16
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        resolve_dtype("int8")


def test_this_machine_decision_is_consistent_with_torch() -> None:
    """Integration: whatever CPU CI runs on, auto agrees with what torch reports and picks a usable dtype."""
    choice = precision_for("cpu")
    feat = CpuBf16Features.detect()
    assert choice == cpu_precision(feat)
    x = torch.randn(8, 8)
    with torch.autocast("cpu", dtype=choice.dtype, enabled=choice.dtype != torch.float32):
        assert (x @ x).dtype == choice.dtype


def test_measured_slowdown_is_a_positive_ratio() -> None:
    assert precision.measure_bf16_slowdown(size=32, repeats=1) > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_auto_follows_bf16_support(fresh_cache) -> None:
    choice = precision_for(torch.device("cuda", 0))
    assert (choice.dtype == torch.bfloat16) == (torch.cuda.get_device_capability(0)[0] >= 8)
    assert "CUDA device" in choice.reason
