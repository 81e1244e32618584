"""Benchmarks are not tests: CI only checks that each script runs one short step (``--smoke``) and reports."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOKE_DIR = ROOT / "bench" / "results" / "smoke"


def _run(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--smoke", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _check(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def test_grpo_vs_trl_smoke() -> None:
    pytest.importorskip("trl")
    out = _check(_run("grpo_vs_trl.py"))
    assert "ours/TRL" in out
    path = max(SMOKE_DIR.glob("grpo_vs_trl_*.json"), key=lambda p: p.stat().st_mtime)  # named after the machine kind
    record = json.loads(path.read_text())
    assert record["machine"]["cpu_kind"] and "cpu_native_bf16" in record["machine"]
    (result,) = record["results"]
    assert result["case"]["trl_grad_ckpt"] is False  # the same work as ours unless asked
    assert len(result["verl_s"]) == 1 and len(result["trl_s"]) == 1
    assert result["verl_s"][0] > 0 and result["trl_s"][0] > 0
    # both sides generated the exact response length asked for
    assert result["verl_response_length_mean"] == result["case"]["response_length"]


def test_limits_smoke() -> None:
    out = _check(_run("limits.py", "--threads", "1", "--repeats", "1"))
    record = json.loads((SMOKE_DIR / "limits.json").read_text())
    assert record["peaks"]["matmul_float32_peak_gflops"] > 0
    assert 0 < record["training"][0]["mfu"]
    assert record["rollout"][0]["ours_over_raw_time"] > 0
    assert "MFU" in out


def test_scaling_smoke() -> None:
    out = _check(_run("scaling.py"))
    record = json.loads((SMOKE_DIR / "scaling.json").read_text())
    assert [(p["batch"], p["response_length"]) for p in record["points"]] == [(2, 8), (2, 16), (4, 8)]
    assert all(p["step_s"] > 0 for p in record["points"])
    assert "s/step" in out


def test_scaling_ranks_smoke() -> None:
    out = _check(_run("scaling_ranks.py", "--ranks", "1", "2"))
    record = json.loads((SMOKE_DIR / "scaling_ranks.json").read_text())
    assert [p["ranks"] for p in record["points"]] == [1, 2]
    assert all(p["step_s"] > 0 and p["gen_tokens_per_s"] > 0 for p in record["points"])
    assert "generated tokens/s" in out and "FSDP2 comm GB/rank" in out


def test_learning_smoke() -> None:
    _check(_run("learning.py"))
    rows = [json.loads(line) for line in (SMOKE_DIR / "learning.jsonl").read_text().splitlines()]
    # an evaluation before training (step 0) and one after the single step
    assert [r["step"] for r in rows] == [0, 1]
    assert all(0.0 <= r["val_acc"] <= 1.0 for r in rows)
    assert (SMOKE_DIR / "learning.png").exists()


def test_demo_time_smoke() -> None:
    out = _check(_run("demo_time.py", timeout=600))
    assert "results:" in out
    path = max(SMOKE_DIR.glob("demo_time_*.json"), key=lambda p: p.stat().st_mtime)
    record = json.loads(path.read_text())
    assert record["steps"] == 1 and record["wall_s"] > 0
    assert 0.0 <= record["accuracy_before"] <= 1.0 and 0.0 <= record["accuracy_after"] <= 1.0
    assert record["machine"]["dtype_auto"] in ("bfloat16", "float32")


def test_decode_vs_generate_smoke() -> None:
    out = _check(_run("decode_vs_generate.py"))
    assert "x generate" in out
    path = max(SMOKE_DIR.glob("decode_vs_generate_*.json"), key=lambda p: p.stat().st_mtime)
    results = json.loads(path.read_text())["results"]
    assert {r["arch"] for r in results} == {"qwen2", "gpt2", "mistral"}
    # every side of every architecture decodes greedily to transformers generate's tokens
    assert all(r["ms_per_token"] > 0 and r["greedy_tokens_equal_generate"] for r in results)


def test_decode_speed_smoke() -> None:
    out = _check(_run("decode_speed.py"))
    assert "ms/step" in out
    path = max(SMOKE_DIR.glob("decode_speed_*.json"), key=lambda p: p.stat().st_mtime)
    record = json.loads(path.read_text())
    modes = {r["mode"] for r in record["results"]}
    assert "eager" in modes and all(r["ms_per_step"] > 0 and r["same_tokens_as_first_mode"] for r in record["results"])


def test_gpu_grpo_vs_trl_smoke() -> None:
    """The GPU table's script on a tiny shape: each side in its own process, ours with timing and MFU."""
    pytest.importorskip("trl")
    out = _check(_run("gpu_grpo_vs_trl.py", timeout=600))
    assert "ours/TRL" in out
    path = max(SMOKE_DIR.glob("gpu_grpo_vs_trl_*.json"), key=lambda p: p.stat().st_mtime)
    results = {r["args"]["side"]: r for r in json.loads(path.read_text())["results"]}
    assert set(results) == {"verl", "trl-ckpt-off"} and not any(r["oom"] for r in results.values())
    ours = results["verl"]
    assert ours["step_s"][0] > 0 and results["trl-ckpt-off"]["step_s"][0] > 0
    assert ours["extra"]["response_length/mean"] == [8.0]  # exactly the asked length
    assert 0 < ours["extra"]["perf/mfu/actor"][0] < 1 and ours["extra"]["timing_s/gen"][0] > 0


def test_train_compile_smoke() -> None:
    out = _check(_run("train_compile.py"))
    assert "use_torch_compile" in out
    path = max(SMOKE_DIR.glob("train_compile_*.json"), key=lambda p: p.stat().st_mtime)
    (result,) = json.loads(path.read_text())["results"]
    assert result["step_s"] > 0 and result["tflops"] > 0 and result["compiled"] is False


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_agent_turns_vllm_smoke() -> None:
    out = _check(_run("agent_turns_vllm.py"))
    assert "server / batcher wall time" in out
    result = json.loads((SMOKE_DIR / "agent_turns_vllm.json").read_text())
    assert result["tokens"]["server"] == result["tokens"]["batcher"] > 0  # the same work on both sides


def test_judge_overlap_smoke() -> None:
    out = _check(_run("judge_overlap.py"))
    assert "overlap / after" in out
    result = json.loads((SMOKE_DIR / "judge_overlap.json").read_text())
    assert result["ratios"] and all(r > 0 for r in result["ratios"])  # both sides ran; their rewards were equal


def test_endpoint_overhead_smoke() -> None:
    pytest.importorskip("openai")
    out = _check(_run("endpoint_overhead.py"))
    assert "extra ms / request vs in-process" in out  # printed only after every side's trajectories matched
    result = json.loads((SMOKE_DIR / "endpoint_overhead.json").read_text())
    assert len(result["table"]) == 3 and all(row["wall s / batch"] > 0 for row in result["table"])


def test_logprob_memory_head_rows_smoke() -> None:
    """The --head rows (hidden + W inputs): the fused head holds less than the naive head and agrees with it."""
    out = _check(_run("logprob_memory.py", "--head"))
    table = [line.split() for line in out.splitlines() if line.split()[1:2] and line.split()[1].isdigit()]
    rows = {cells[0]: float(cells[5]) for cells in table}
    assert set(rows) == {"head-naive", "head-chunked", "fused"}
    assert rows["fused"] < rows["head-naive"]
    diff = float(out.rsplit("=", 1)[1])
    assert diff < 1e-4
