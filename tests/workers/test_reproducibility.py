"""Which runs repeat themselves: the line each run logs once and ``training/reproducible``."""

from __future__ import annotations

import pytest

from verl.workers.reproducibility import reproducibility


@pytest.mark.parametrize(
    ("engine", "device", "deterministic", "expected", "words"),
    [
        ("hf", "cpu", False, True, "hf engine on cpu"),
        ("vllm", "cpu", False, True, "vllm engine on cpu"),
        ("hf", "cuda", False, False, "trainer.deterministic=true"),
        ("hf", "cuda", True, True, "hf engine on cuda"),
        ("vllm", "cuda", True, False, "not batch-invariant"),
        ("given", "cpu", False, False, "the caller's own"),
    ],
)
def test_reproducibility(engine: str, device: str, deterministic: bool, expected: bool, words: str) -> None:
    ok, line = reproducibility(engine, device, deterministic)
    assert ok is expected and words in line
    assert line.startswith("reproducible: " if expected else ("not reproducible: ", "unknown: "))
