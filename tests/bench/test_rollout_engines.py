"""``bench/rollout_engines.py``'s bookkeeping: shapes, the alternation of the two sides and the ratios of the
medians (the sides themselves are main_ppo steps, exercised by the trainer's tests)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rollout_engines", ROOT / "bench" / "rollout_engines.py")
rollout_engines = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rollout_engines)


def test_shapes_are_parsed_and_bad_ones_named() -> None:
    assert rollout_engines.parse_shape("8x4x16") == (8, 4, 16)
    for bad in ("8x4", "8x0x16", "axbxc"):
        with pytest.raises(argparse.ArgumentTypeError, match=bad):
            rollout_engines.parse_shape(bad)


def test_sides_alternate_and_ratios_are_of_the_medians(monkeypatch) -> None:
    order = []
    times = {"hf": iter([2.0, 4.0, 3.0]), "vllm": iter([4.0, 4.0, 2.0])}

    def fake_side(engine, shape, args):
        order.append(engine)
        step = next(times[engine])
        phases = {"gen": step / 2, "step": step}
        return {"median_step_s": step, "median_gen_s": step / 2, "peak_rss_gib": 1.0, "median_phase_s": phases}

    monkeypatch.setattr(rollout_engines, "_run_side", fake_side)
    result = rollout_engines.compare((8, 4, 16), argparse.Namespace(rounds=3))
    assert order == ["hf", "vllm", "vllm", "hf", "hf", "vllm"]  # order flipped each round
    assert result["median_step_s"] == {"hf": 3.0, "vllm": 4.0}
    assert result["step_ratio_hf_over_vllm"] == pytest.approx(1.0)  # median of 0.5, 1.0, 1.5
    table = rollout_engines.markdown_table([result], "avx2")
    assert "| avx2 | 8 x 4 x 16 | 3.00 (1.50) | 4.00 (2.00) | 1.00 |" in table
