"""The GPU session kit (bench/gpu_kit/): its plan fits the device budgets, its wheels cover what the GPU image lacks,
its CUDA test list is complete, and gpu_grpo_vs_trl.py tells a crash from running out of memory."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "bench" / "gpu_kit"
sys.path.insert(0, str(ROOT))

from bench import gpu_grpo_vs_trl as g  # noqa: E402
from bench.gpu_kit import kit  # noqa: E402


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (KIT / "wheels.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            assert _norm(name) not in pins, f"{name} pinned twice"
            pins[_norm(name)] = version
    return pins


def test_plan_lists_every_stage_with_limits_that_fit_each_part_budget() -> None:
    out = subprocess.run(
        ["bash", str(KIT / "run.sh"), "--plan", "--python", sys.executable], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    listed = [line.split()[0] for line in out.stdout.splitlines()[1:] if not line.startswith("part")]
    assert listed == [s.name for s in kit.STAGES]
    part1 = ["env", "cuda_tests", "grpo", "grpo_eager", "decode", "decode_compile"]
    assert [s.name for s in kit.select(["part1"])] == part1
    assert {s.name for s in kit.select(["part2"])} == {"trl", "mem7b"}
    for part, budget in (("part1", 8 * 60), ("part2", 5 * 60)):
        stages = [s for s in kit.STAGES if s.part == part]
        assert kit.INSTALL_S + sum(s.limit_s for s in stages) <= budget == kit.BUDGETS[part]
        assert f"{part}: limits sum to {kit.INSTALL_S + sum(s.limit_s for s in stages)} s" in out.stdout
        assert all(0 < s.estimate_s <= s.limit_s for s in stages)
    assert "OVER" not in out.stdout
    with pytest.raises(SystemExit, match="unknown stage"):
        kit.select(["part9"])


def test_stage_commands_fill_every_placeholder_and_use_the_kit_tokenizer() -> None:
    fields = dict(kit.decode_options(), py="python3", tok=kit.TOKENIZER, state="/s", results="bench/results",
                  smoke_flag="")  # fmt: skip
    for stage in kit.STAGES:
        for cmd in stage.commands + (stage.smoke or ()):
            text = cmd.format(dir="/d", **fields)
            assert "{" not in text, (stage.name, text)
            if "gpu_grpo_vs_trl.py" in text and "--merge" not in text:
                assert f"--tokenizer {kit.TOKENIZER}" in text  # the GPU image cannot read the bundled GGUF
    mem7b = next(s for s in kit.STAGES if s.name == "mem7b").commands[0]
    for key in ("fsdp_config.offload_policy=true", "enable_gradient_checkpointing=true", "--shapes 7B",
                "--memory-cap-gb"):  # fmt: skip
        assert key in mem7b


def test_cuda_test_list_is_every_file_with_a_cuda_skip_mark() -> None:
    mark = re.compile(r"pytest\.mark\.skipif\(\s*not torch\.cuda\.is_available\(\)")  # kit.py's grep, as a regex
    marked = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if mark.search(p.read_text()))
    assert marked == sorted(kit.CUDA_TEST_FILES)
    for test in kit.CUDA_TESTS:
        assert (ROOT / test.split("::")[0]).is_file()
    assert all(any(t.startswith(f) for t in kit.CUDA_TESTS) for f in kit.CUDA_TEST_FILES)


def test_wheels_cover_the_core_dependencies_the_gpu_image_lacks() -> None:
    image = {_norm(line) for line in (KIT / "image_packages.txt").read_text().splitlines() if line and line[0] != "#"}
    assert {"torch", "transformers", "accelerate", "pyarrow", "pytest-timeout"} <= image
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    core = [Requirement(d) for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    pins = _pins()
    missing = {_norm(r.name) for r in core} - image - {"ray"}  # ray: the kit's path runs in-process, without it
    assert missing and missing <= set(pins), f"not carried: {missing - set(pins)}"
    for req in core:
        if _norm(req.name) in pins:
            assert Version(pins[_norm(req.name)]) in req.specifier, f"{req.name}=={pins[_norm(req.name)]} vs {req}"
    assert not set(pins) & image - {"typing-extensions"}  # carry only what the image lacks (and one known version)
    assert "ray" not in pins and {"trl", "datasets", "antlr4-python3-runtime"} <= set(pins)


def _fake_child(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(body)
    return [sys.executable, str(script)]


def test_spawn_reports_out_of_memory_only_when_it_was_one(tmp_path: Path) -> None:
    args = {"shape": "0.5B", "side": "verl"}
    crash = _fake_child(tmp_path, "import sys\nprint('loading', file=sys.stderr)\nraise ImportError('no module x')\n")
    result = g._spawn(args, crash)
    assert not result["oom"] and result["exit_code"] == 1
    assert result["failed"] == "failed (exit 1): ImportError: no module x"
    oom = _fake_child(tmp_path, "raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')\n")
    result = g._spawn(args, oom)
    assert result["oom"] and "failed" not in result
    ok = _fake_child(tmp_path, f"print({g.MARK!r} + {json.dumps(json.dumps({'args': args, 'oom': False}))})\n")
    assert g._spawn(args, ok) == {"args": args, "oom": False}
    assert g.classify_failure(args, -9, [])["failed"] == "failed (exit -9): no output on stderr"


def test_table_shows_failures_and_pairs_ratios_only_on_one_gpu() -> None:
    def side(name: str, step: float, uuid: str) -> dict:
        return {"args": {"shape": "0.5B", "side": name, "response_length": 256}, "oom": False, "step_s": [step],
                "extra": {"timing_s/gen": [1.0]}, "peak_gpu_gb": 10.0, "gpu": {"uuid": uuid}}  # fmt: skip

    table = g.summarize([side("verl", 2.0, "A"), side("trl-ckpt-off", 8.0, "A"), side("trl-ckpt-on", 9.0, "B")])
    assert table.splitlines()[-1].endswith("| 0.25 / other GPU |")
    crashed = {"args": {"shape": "1.5B", "side": "verl"}, "oom": False, "failed": "failed (exit 1): KeyError: 'x'"}
    assert "failed (exit 1): KeyError: 'x'" in g.summarize([crashed])
    assert "out of memory" in g.summarize([{"args": {"shape": "7B", "side": "verl"}, "oom": True}])


def test_runner_skips_what_cannot_finish_times_out_what_overruns_and_bundles_what_finished(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(kit, "MIN_COMMAND_S", 1)
    runner = kit.Runner(tmp_path / "out", deadline=0.0, smoke=False, python=sys.executable, state=tmp_path / "state")
    runner.cuda = True  # as on the GPU machine
    late = kit.Stage("late", "part1", 30, 20, ("true",), None, "")
    runner.run_stage(late, {})
    assert runner.bundle["stages"]["late"]["status"].startswith("skipped: needs about 20 s, 0 s left")
    runner.deadline = kit.time.time() + 60
    write = "import json, sys, time; json.dump(dict(table='| a |'), open(sys.argv[1], 'w')); time.sleep(30)"
    writes = f'{sys.executable} -c "{write}" {{dir}}/r.json'  # {dir}: the stage's folder, bundled
    slow = kit.Stage("slow", "part1", 3, 1, (writes, "true"), None, "")
    runner.run_stage(slow, {})
    entry = json.loads((tmp_path / "out" / "bundle.json").read_text())["stages"]["slow"]
    assert entry["commands"][0]["status"].startswith("timed out after")
    assert entry["files"] == {"r.json": {"table": "| a |"}}  # what the command wrote before its limit
    assert "command 1: skipped" in entry["status"]
    assert "| a |" in runner.summary() and "skipped: needs about" in (tmp_path / "out" / "kit.log").read_text()
