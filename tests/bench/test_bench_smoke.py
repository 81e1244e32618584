"""Benchmarks are not tests: CI only checks that each script runs one short step (``--smoke``) and reports."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOKE_DIR = ROOT / "bench" / "results" / "smoke"


# Each smoke is one single-threaded script (OMP_NUM_THREADS=1), and CI has 2 cores: the module's smokes run in two
# lanes side by side, started the first time a test asks for one; each test then checks its own script's run. The
# lanes are fixed: the two largest processes (the demo's 135M model and the vLLM engine) never overlap, and the
# scripts sharing the config-S model directory in the temp dir run one after another.
# Measured alone (stop 52, 2-core Zen 4): the first lane 83 s, the second 84 s (prefill_memory, 11 s, closes it).
LANES: tuple[tuple[str, ...], ...] = (
    ("demo_time.py", "agent_turns_vllm.py", "decode_vs_generate.py", "endpoint_overhead.py", "judge_overlap.py",
     "decode_speed.py", "limits.py", "train_compile.py", "logprob_memory.py", "packing.py"),
    ("gpu_grpo_vs_trl.py", "grpo_vs_trl.py", "learning.py", "scaling_ranks.py", "scaling.py", "prefill_memory.py"),
)  # fmt: skip
# a test whose name is not ``test_<script>_smoke``: the script it checks
SCRIPT_OF_TEST = {"test_logprob_memory_head_rows_smoke": "logprob_memory.py"}
ARGS = {
    "logprob_memory.py": ("--head",),  # the --head rows (hidden + W inputs)
    "limits.py": ("--threads", "1", "--repeats", "1"),
    "scaling_ranks.py": ("--ranks", "1", "2"),
    # one torch thread, as the other scripts' defaults (a second one would take the other lane's core)
    "decode_vs_generate.py": ("--threads", "1"),
    "learning.py": ("--threads", "1"),
}
TIMEOUT_S = {"demo_time.py": 600, "gpu_grpo_vs_trl.py": 600}
# what a script needs beyond the test profile's core; without it the script is not started and its test skips
NEEDS = {
    "grpo_vs_trl.py": "trl",
    "gpu_grpo_vs_trl.py": "trl",
    "agent_turns_vllm.py": "vllm",
    "endpoint_overhead.py": "openai",
}


def _run(script: str, *args: str, timeout: int | None = None) -> subprocess.CompletedProcess:
    """``bench/<script> --smoke <args>`` (default: the script's :data:`ARGS`), its output captured."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--smoke", *(args or ARGS.get(script, ()))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout or TIMEOUT_S.get(script, 300),
    )


class _Smokes:
    """The selected smokes, run in :data:`LANES` by two threads; :meth:`result` waits for one script's run."""

    def __init__(self, scripts: set[str]) -> None:
        self._done = {script: threading.Event() for script in scripts}
        self._results: dict[str, subprocess.CompletedProcess | BaseException] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._lane, args=([s for s in lane if s in scripts],), daemon=True)
            for lane in LANES
        ]
        for thread in self._threads:
            thread.start()

    def _lane(self, scripts: list[str]) -> None:
        for script in scripts:
            if self._stop.is_set():
                self._results[script] = RuntimeError("the test module ended before this smoke started")
            else:
                try:
                    self._results[script] = _run(script)
                except BaseException as err:  # a timeout: the waiting test raises it
                    self._results[script] = err
            self._done[script].set()

    def result(self, script: str) -> subprocess.CompletedProcess:
        if script not in self._done:  # not in a lane: run here, beside the lanes
            return _run(script)
        self._done[script].wait()
        result = self._results[script]
        if isinstance(result, BaseException):
            raise result
        return result

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


@pytest.fixture(scope="module")
def smokes(request: pytest.FixtureRequest) -> Iterator[_Smokes]:
    """The smokes of this session's selected tests in this module (a test ``test_<name>_smoke`` runs
    ``bench/<name>.py --smoke``), started together; a script whose extra is missing is left out."""
    known = {script for lane in LANES for script in lane}
    mine = [item for item in request.session.items if getattr(item, "module", None) is request.module]
    selected = {
        SCRIPT_OF_TEST.get(item.originalname, f"{item.originalname.removeprefix('test_').removesuffix('_smoke')}.py")
        for item in mine
    }
    scripts = {s for s in selected & known if s not in NEEDS or importlib.util.find_spec(NEEDS[s]) is not None}
    runs = _Smokes(scripts)
    yield runs
    runs.close()


def _check(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def test_grpo_vs_trl_smoke(smokes) -> None:
    pytest.importorskip("trl")
    out = _check(smokes.result("grpo_vs_trl.py"))
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


def test_limits_smoke(smokes) -> None:
    out = _check(smokes.result("limits.py"))
    record = json.loads((SMOKE_DIR / "limits.json").read_text())
    assert record["peaks"]["matmul_float32_peak_gflops"] > 0
    assert 0 < record["training"][0]["mfu"]
    assert record["rollout"][0]["ours_over_raw_time"] > 0
    assert "MFU" in out


def test_scaling_smoke(smokes) -> None:
    out = _check(smokes.result("scaling.py"))
    record = json.loads((SMOKE_DIR / "scaling.json").read_text())
    assert [(p["batch"], p["response_length"]) for p in record["points"]] == [(2, 8), (2, 16), (4, 8)]
    assert all(p["step_s"] > 0 for p in record["points"])
    assert "s/step" in out


def test_scaling_ranks_smoke(smokes) -> None:
    out = _check(smokes.result("scaling_ranks.py"))
    record = json.loads((SMOKE_DIR / "scaling_ranks.json").read_text())
    assert [p["ranks"] for p in record["points"]] == [1, 2]
    assert all(p["step_s"] > 0 and p["gen_tokens_per_s"] > 0 for p in record["points"])
    assert "generated tokens/s" in out and "FSDP2 comm GB/rank" in out


def test_learning_smoke(smokes) -> None:
    _check(smokes.result("learning.py"))
    rows = [json.loads(line) for line in (SMOKE_DIR / "learning.jsonl").read_text().splitlines()]
    # an evaluation before training (step 0) and one after the single step
    assert [r["step"] for r in rows] == [0, 1]
    assert all(0.0 <= r["val_acc"] <= 1.0 for r in rows)
    assert (SMOKE_DIR / "learning.png").exists()


def test_demo_time_smoke(smokes) -> None:
    out = _check(smokes.result("demo_time.py"))
    assert "results:" in out
    path = max(SMOKE_DIR.glob("demo_time_*.json"), key=lambda p: p.stat().st_mtime)
    record = json.loads(path.read_text())
    assert record["steps"] == 1 and record["wall_s"] > 0
    assert 0.0 <= record["accuracy_before"] <= 1.0 and 0.0 <= record["accuracy_after"] <= 1.0
    assert record["machine"]["dtype_auto"] in ("bfloat16", "float32")


def test_decode_vs_generate_smoke(smokes) -> None:
    out = _check(smokes.result("decode_vs_generate.py"))
    assert "x generate" in out
    path = max(SMOKE_DIR.glob("decode_vs_generate_*.json"), key=lambda p: p.stat().st_mtime)
    results = json.loads(path.read_text())["results"]
    assert {r["arch"] for r in results} == {"qwen2", "gpt2", "mistral", "qwen3"}
    static = {r["arch"] for r in results if r["side"] == "loop (static cache)"}
    assert static == {"qwen2", "qwen3"}
    # every side of every architecture decodes greedily to transformers generate's tokens
    assert all(r["ms_per_token"] > 0 and r["greedy_tokens_equal_generate"] for r in results)


def test_decode_speed_smoke(smokes) -> None:
    out = _check(smokes.result("decode_speed.py"))
    assert "ms/step" in out
    path = max(SMOKE_DIR.glob("decode_speed_*.json"), key=lambda p: p.stat().st_mtime)
    record = json.loads(path.read_text())
    modes = {r["mode"] for r in record["results"]}
    assert "eager" in modes and all(r["ms_per_step"] > 0 and r["same_tokens_as_first_mode"] for r in record["results"])


def test_gpu_grpo_vs_trl_smoke(smokes) -> None:
    """The GPU table's script on a tiny shape: each side in its own process, ours with timing and MFU."""
    pytest.importorskip("trl")
    out = _check(smokes.result("gpu_grpo_vs_trl.py"))
    assert "ours/TRL" in out
    path = max(SMOKE_DIR.glob("gpu_grpo_vs_trl_*.json"), key=lambda p: p.stat().st_mtime)
    results = {r["args"]["side"]: r for r in json.loads(path.read_text())["results"]}
    assert set(results) == {"verl", "trl-ckpt-off"} and not any(r["oom"] for r in results.values())
    ours = results["verl"]
    assert ours["step_s"][0] > 0 and results["trl-ckpt-off"]["step_s"][0] > 0
    assert ours["extra"]["response_length/mean"] == [8.0]  # exactly the asked length
    assert 0 < ours["extra"]["perf/mfu/actor"][0] < 1 and ours["extra"]["timing_s/gen"][0] > 0


def test_train_compile_smoke(smokes) -> None:
    out = _check(smokes.result("train_compile.py"))
    assert "use_torch_compile" in out
    path = max(SMOKE_DIR.glob("train_compile_*.json"), key=lambda p: p.stat().st_mtime)
    (result,) = json.loads(path.read_text())["results"]
    assert result["step_s"] > 0 and result["tflops"] > 0 and result["compiled"] is False


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_agent_turns_vllm_smoke(smokes) -> None:
    out = _check(smokes.result("agent_turns_vllm.py"))
    assert "server / batcher wall time" in out
    result = json.loads((SMOKE_DIR / "agent_turns_vllm.json").read_text())
    assert result["tokens"]["server"] == result["tokens"]["batcher"] > 0  # the same work on both sides


def test_judge_overlap_smoke(smokes) -> None:
    out = _check(smokes.result("judge_overlap.py"))
    assert "overlap / after" in out
    result = json.loads((SMOKE_DIR / "judge_overlap.json").read_text())
    assert result["ratios"] and all(r > 0 for r in result["ratios"])  # both sides ran; their rewards were equal


def test_endpoint_overhead_smoke(smokes) -> None:
    pytest.importorskip("openai")
    out = _check(smokes.result("endpoint_overhead.py"))
    assert "extra ms / request vs in-process" in out  # printed only after every side's trajectories matched
    result = json.loads((SMOKE_DIR / "endpoint_overhead.json").read_text())
    assert len(result["table"]) == 3 and all(row["wall s / batch"] > 0 for row in result["table"])


def test_logprob_memory_head_rows_smoke(smokes) -> None:
    """The --head rows (hidden + W inputs): the fused head and the compiled chunk kernels hold less than the naive
    head, and the fused head agrees with it."""
    out = _check(smokes.result("logprob_memory.py"))
    table = [line.split() for line in out.splitlines() if line.split()[1:2] and line.split()[1].isdigit()]
    rows = {cells[0]: float(cells[5]) for cells in table}
    assert set(rows) == {"head-naive", "head-chunked", "head-compiled", "fused"}
    assert rows["fused"] < rows["head-naive"] and rows["head-compiled"] < rows["head-naive"]
    diff = float(out.rsplit("=", 1)[1])
    assert diff < 1e-4


def test_endpoint_stream_runs_one_short_round() -> None:
    """bench/endpoint_stream.py --smoke: a streamed answer's first chunk comes before its end, the text is checked."""
    out = _check(_run("endpoint_stream.py"))
    assert "s to first content chunk" in out  # printed only after both answers matched the recorded ids
    result = json.loads((SMOKE_DIR / "endpoint_stream.json").read_text())
    (first, total, chunks), *_ = result["runs"]["stream"]
    assert first < total and chunks > 1


def test_prefill_memory_smoke(smokes) -> None:
    """Row chunks of 128 prompt tokens (4 chunks of 2 rows) against one forward: the same last-position logits."""
    out = _check(smokes.result("prefill_memory.py"))
    assert "prefill_tokens=128" in out and "prefill_tokens=0" in out
    path = max(SMOKE_DIR.glob("prefill_memory_*.json"), key=lambda p: p.stat().st_mtime)
    results = json.loads(path.read_text())["results"]
    assert [r["prefill_tokens"] for r in results] == [128, 0] and all(r["seconds"] > 0 for r in results)
    assert results[1]["max_abs_diff_from_first"] < 0.05  # bf16 rounding at most (a chunk is a smaller matmul)


def test_packing_smoke(smokes) -> None:
    """Padded and packed actor steps, the three micro-batch layouts and the SFT sides ran; their values agree."""
    out = _check(smokes.result("packing.py"))
    assert "packed / padded:" in out
    path = max(SMOKE_DIR.glob("packing_tiny_*.json"), key=lambda p: p.stat().st_mtime)
    result = json.loads(path.read_text())
    assert result["tokens"]["valid"] < result["tokens"]["rows"] < result["tokens"]["padded"]
    assert set(result["layout_seconds"]) == {"padded", "one row", "rows"}
    assert max(result["layout_max_abs_diff"].values()) < 0.05  # bf16 rounding at most
    losses = result["sft"]["loss_sum"]  # the SFT loss: all logits, padded, packed
    assert set(losses) == {"all logits", "padded", "packed"}
    assert max(losses.values()) - min(losses.values()) < 0.01 * abs(losses["padded"])
