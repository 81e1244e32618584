"""The per-role profiler's CUDA tools (nsys, torch_memory) and profile_continuous_steps, on CPU: the CUDA calls are
recorded by monkeypatching torch.cuda.nvtx / torch.cuda.profiler / torch.cuda.memory, the worker side runs in this
process (a fake group of one rank calling verl.hardware.profiler like Worker.start_profile does)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from verl.hardware import cuda_profile, profiler
from verl.trainer.config import ConfigError, load_config
from verl.trainer.ppo.driver_workers import worker_nsight_runtime_env
from verl.trainer.ppo.role_profiler import RoleProfiler, controller_command


class _OneRankGroup:
    """A worker group of one rank living in this process: its profile methods are the workers' own."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._bound_methods = {"update_actor": "", "compute_log_prob": "", "start_profile": ""}

    def start_profile(self, spec: dict[str, Any]) -> list[bool]:
        return [profiler.start_worker_trace(0, spec)]

    def stop_profile(self) -> list[str | None]:
        return [profiler.stop_worker_trace(0)]

    def mark_profile_range(self, name: str | None) -> list[None]:
        return [profiler.mark_worker_range(name)]

    def profile_finish_hook(self, spec: dict[str, Any]) -> list[int | None]:
        return [profiler.run_worker_finish_hook(0, spec)]

    def update_actor(self) -> None:
        self.calls.append("update_actor")

    def compute_log_prob(self) -> None:
        self.calls.append("compute_log_prob")


@pytest.fixture
def cuda_log(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Pretend CUDA is there and record the NVTX, capture-range and memory-history calls in order."""
    log: list[tuple[Any, ...]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda msg: log.append(("push", msg)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: log.append(("pop",)))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: log.append(("start",)))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: log.append(("stop",)))

    def record(enabled: str | None = "all", context: str = "all", stacks: str = "all", max_entries: int = 1) -> None:
        log.append(("record", enabled, context, stacks, max_entries))

    def dump(filename: str) -> None:
        log.append(("dump", os.path.basename(filename)))
        Path(filename).write_bytes(pickle.dumps({"segments": []}))

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", dump)
    return log


def _run(overrides: list[str], steps: list[int], tmp_path: Path) -> tuple[RoleProfiler, _OneRankGroup]:
    cfg = load_config([f"global_profiler.save_path={tmp_path}", *overrides])
    prof, wg = RoleProfiler.from_config(cfg), _OneRankGroup()
    for step in steps:
        with prof.step(step, {"actor_rollout": wg}):
            wg.compute_log_prob()
            wg.update_actor()
    return prof, wg


def test_nsys_step_capture_range_with_nvtx_range_per_call(cuda_log: list[tuple[Any, ...]], tmp_path: Path) -> None:
    """discrete=false: one capture range per traced step (step 2 of 1..2 is not traced), an NVTX range around the
    step on the worker and the driver and one around each call."""
    _run(["global_profiler.tool=nsys", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true"],
         [1, 2], tmp_path)  # fmt: skip
    assert cuda_log == [
        ("push", "step1"), ("start",), ("push", "actor_rollout step1"),
        ("push", "actor_rollout/compute_log_prob step1"), ("pop",),
        ("push", "actor_rollout/update_actor step1"), ("pop",),
        ("pop",), ("stop",), ("pop",),
    ]  # fmt: skip


def test_nsys_discrete_and_continuous(cuda_log: list[tuple[Any, ...]], tmp_path: Path) -> None:
    """discrete (from global_tool_config.nsys.discrete): one capture range per call; continuous steps [1,2]: one
    capture range from the start of step 1 to the end of step 2."""
    base = ["global_profiler.tool=nsys", "actor_rollout_ref.actor.profiler.enable=true"]
    _run([*base, "global_profiler.steps=[3]", "global_profiler.global_tool_config.nsys.discrete=true"], [3], tmp_path)
    starts = [e for e in cuda_log if e[0] in ("start", "stop")]
    assert starts == [("start",), ("stop",), ("start",), ("stop",)]
    assert ("push", "actor_rollout/update_actor step3") in cuda_log
    cuda_log.clear()
    _run([*base, "global_profiler.steps=[1,2]", "global_profiler.profile_continuous_steps=true"], [1, 2], tmp_path)
    assert [e for e in cuda_log if e[0] in ("start", "stop")] == [("start",), ("stop",)]
    assert ("push", "actor_rollout step1-2") in cuda_log and ("push", "actor_rollout/update_actor step2") in cuda_log


def test_nsys_ray_options_and_driver_command() -> None:
    cfg = load_config(["global_profiler.tool=nsys", "global_profiler.steps=[1,2,5]"])
    nsight = worker_nsight_runtime_env(cfg)["runtime_env"]["nsight"]
    assert nsight["capture-range"] == "cudaProfilerApi" and nsight["capture-range-end"] == "repeat-shutdown:18"
    assert nsight["trace"] == "cuda,nvtx,cublas,ucx" and "kill" in nsight
    assert worker_nsight_runtime_env(load_config(["global_profiler.tool=torch", "global_profiler.steps=[1]"])) is None
    assert controller_command(cfg).startswith("nsys profile --trace=cuda,nvtx,cublas,ucx --cuda-memory-usage=true")


def test_nsight_runtime_env_is_merged_over_the_roles_env_vars() -> None:
    pytest.importorskip("ray")
    from verl.single_controller.factory import add_ray_options
    from verl.single_controller.ray import RayClassWithInitArgs

    cia = RayClassWithInitArgs(_OneRankGroup).update_options({"runtime_env": {"env_vars": {"A": "1"}}, "num_cpus": 1})
    add_ray_options(cia, {"runtime_env": {"nsight": {"trace": "cuda"}}})
    assert cia.options == {"runtime_env": {"env_vars": {"A": "1"}, "nsight": {"trace": "cuda"}}, "num_cpus": 1}


def test_nsys_relocates_this_process_reports(tmp_path: Path) -> None:
    src = tmp_path / "nsight"
    src.mkdir()
    (src / f"worker_process_{os.getpid()}.1.nsys-rep").write_text("r")
    (src / "worker_process_1.1.nsys-rep").write_text("other process")
    spec = {"role": "critic", "save_path": str(tmp_path / "out")}
    moved = cuda_profile.relocate_nsys_reports(spec, os.getpid(), str(src))
    assert [os.path.basename(p) for p in moved] == [
        f"critic_{os.uname().nodename}_worker_process_{os.getpid()}.1.nsys-rep"
    ]
    assert os.listdir(src) == ["worker_process_1.1.nsys-rep"]


def test_torch_memory_snapshot_per_traced_step(cuda_log: list[tuple[Any, ...]], tmp_path: Path) -> None:
    """Every group is snapshotted on the traced steps (enable or not, as upstream), with the global options."""
    prof, _ = _run(
        ["global_profiler.tool=torch_memory", "global_profiler.steps=[2]",
         "global_profiler.global_tool_config.torch_memory.trace_alloc_max_entries=500",
         "global_profiler.global_tool_config.torch_memory.context=alloc"],
        [1, 2], tmp_path,
    )  # fmt: skip
    assert cuda_log == [
        ("record", "all", "alloc", "all", 500),
        ("dump", f"step2_rank0.pickle.tmp-{os.getpid()}"),
        ("record", None, "all", "all", 1),
    ]
    assert prof.traces == [str(tmp_path / "actor_rollout" / "step2_rank0.pickle")]
    assert pickle.loads(Path(prof.traces[0]).read_bytes()) == {"segments": []}


def test_torch_memory_kw_args_must_be_torch_arguments() -> None:
    memory = {"trace_alloc_max_entries": 5, "stack_depth": 32, "context": "all", "stacks": "python", "kw_args": {}}
    kwargs = cuda_profile.record_memory_kwargs(memory)
    assert kwargs["max_entries"] == 5 and kwargs["stacks"] == "python"
    with pytest.raises(ValueError, match=r"kw_args: \['colour'\] are not arguments"):
        cuda_profile.record_memory_kwargs(dict(memory, kw_args={"colour": 1}))


def test_cuda_tools_refused_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = load_config(["global_profiler.tool=nsys", "global_profiler.steps=[1]",
                       "actor_rollout_ref.actor.profiler.enable=true"])  # fmt: skip
    # a ConfigError: the entry point says it in one block and exits 2, no traceback
    with pytest.raises(ConfigError, match="global_profiler.tool=nsys needs CUDA"):
        RoleProfiler.from_config(cfg)


@pytest.mark.parametrize(("steps", "files"), [([1, 2], ["step1-2_rank0.json"]),
                                              ([1, 3], ["step1_rank0.json", "step3_rank0.json"])])  # fmt: skip
def test_continuous_steps_share_one_torch_trace(steps: list[int], files: list[str], tmp_path: Path) -> None:
    prof, wg = _run(
        ["global_profiler.tool=torch", f"global_profiler.steps={steps}",
         "global_profiler.profile_continuous_steps=true", "actor_rollout_ref.actor.profiler.enable=true"],
        [1, 2, 3], tmp_path,
    )  # fmt: skip
    assert sorted(os.listdir(tmp_path / "actor_rollout")) == files
    assert len(prof.traces) == len(files) and wg.calls.count("update_actor") == 3


def test_continuous_trace_closes_when_a_step_raises(tmp_path: Path) -> None:
    cfg = load_config([f"global_profiler.save_path={tmp_path}", "global_profiler.tool=torch",
                       "global_profiler.steps=[1,2]", "global_profiler.profile_continuous_steps=true",
                       "actor_rollout_ref.actor.profiler.enable=true"])  # fmt: skip
    prof, wg = RoleProfiler.from_config(cfg), _OneRankGroup()
    with pytest.raises(RuntimeError), prof.step(1, {"actor_rollout": wg}):
        raise RuntimeError("step failed")
    assert os.listdir(tmp_path / "actor_rollout") == ["step1-2_rank0.json"] and profiler._WORKER_TRACE is None
