"""Upstream v0.9's per-role profiler: global_profiler + <role>.profiler write torch.profiler traces per role, rank
and step (or per call), run the finish hook once, and refuse the tools and options we do not have."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.ppo.test_e2e import task_files, tiny_config  # noqa: F401  (task_files is a fixture)
from verl.hardware.profiler import start_worker_trace, stop_worker_trace, worker_trace_path
from verl.trainer.config import load_config
from verl.trainer.config.validation import ConfigError
from verl.trainer.ppo.role_profiler import RoleProfiler
from verl.trainer.ppo.runner import run_ppo


def test_actor_profiler_traces_the_chosen_step_and_runs_the_hook_once(
    tiny_model_dir: str,
    task_files: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Steps [2] of a 2-step run, actor enabled on rank 0: one whole-step trace of the actor_rollout workers under
    <save_path>/actor_rollout/, and the finish hook ran once with the documented environment."""
    save = tmp_path / "prof"
    hook = 'echo "$VERL_PROFILE_ROLE $VERL_PROFILE_RANK $VERL_PROFILE_TOOL" >> "$VERL_PROFILE_SAVE_PATH/hook.txt"'
    cfg = tiny_config(
        tiny_model_dir,
        task_files,
        tmp_path / "run",
        [
            "global_profiler.tool=torch",
            "global_profiler.steps=[2]",
            f"global_profiler.save_path={save}",
            f"global_profiler.finish_hook_cmd='{hook}'",
            "actor_rollout_ref.actor.profiler.enable=true",
            "actor_rollout_ref.actor.profiler.ranks=[0]",
            "actor_rollout_ref.actor.profiler.tool_config.torch.contents=[cpu,shapes]",
        ],
    )
    run_ppo(cfg)
    assert sorted(os.listdir(save)) == ["actor_rollout", "hook.txt"]
    assert os.listdir(save / "actor_rollout") == ["step2_rank0.json"]
    events = json.loads((save / "actor_rollout" / "step2_rank0.json").read_text())["traceEvents"]
    assert any("Input Dims" in e.get("args", {}) for e in events), "contents=[shapes] records input shapes"
    assert (save / "hook.txt").read_text().split("\n") == ["actor_rollout 0 torch", ""]


def test_continuous_steps_one_trace_over_a_real_run(
    tiny_model_dir: str,
    task_files: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    """profile_continuous_steps with steps [1,2] of a 2-step run: one actor_rollout trace holding both steps."""
    save = tmp_path / "prof"
    overrides = [
        "global_profiler.tool=torch",
        "global_profiler.steps=[1,2]",
        "global_profiler.profile_continuous_steps=true",
        f"global_profiler.save_path={save}",
        "actor_rollout_ref.actor.profiler.enable=true",
    ]
    run_ppo(tiny_config(tiny_model_dir, task_files, tmp_path / "run", overrides))
    assert os.listdir(save / "actor_rollout") == ["step1-2_rank0.json"]
    events = json.loads((save / "actor_rollout" / "step1-2_rank0.json").read_text())["traceEvents"]
    updates = sum(e.get("name") == "Optimizer.step#AdamW.step" for e in events)
    assert updates == 4, "both steps' actor and critic updates (gae: one optimizer step each per training step)"


class _FakeGroup:
    """A worker group of two ranks in one 'process' as seen by RoleProfiler: records what it is asked."""

    def __init__(self) -> None:
        self.log: list[Any] = []
        self._bound_methods = {"generate_sequences": "", "update_actor": "", "start_profile": ""}

    def start_profile(self, spec: dict[str, Any]) -> list[bool]:
        self.log.append(("start", spec["stage"], spec["step"]))
        return [True, False]

    def stop_profile(self) -> list[str | None]:
        self.log.append(("stop",))
        return ["trace", None]

    def generate_sequences(self, x: int) -> int:
        self.log.append(("generate_sequences", x))
        return x + 1

    def update_actor(self, x: int) -> int:
        self.log.append(("update_actor", x))
        return x * 2

    def profile_finish_hook(self, spec: dict[str, Any]) -> None:
        self.log.append(("hook", spec["finish_hook_cmd"]))


def _profiler(extra: list[str]) -> RoleProfiler:
    return RoleProfiler.from_config(load_config(["global_profiler.tool=torch", "global_profiler.steps=[1,3]", *extra]))


def test_discrete_traces_each_call_and_rollout_only_traces_generation() -> None:
    wg = _FakeGroup()
    discrete = "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=true"
    prof = _profiler(["actor_rollout_ref.actor.profiler.enable=true", discrete])
    with prof.step(2, {"actor_rollout": wg}):  # not a traced step
        assert wg.update_actor(1) == 2
    with prof.step(1, {"actor_rollout": wg}):
        assert wg.generate_sequences(1) == 2 and wg.update_actor(3) == 6
    assert wg.update_actor.__func__ is _FakeGroup.update_actor, "the group's methods are restored after the step"
    assert wg.log == [
        ("update_actor", 1),
        ("start", "generate_sequences", 1), ("generate_sequences", 1), ("stop",),
        ("start", "update_actor", 1), ("update_actor", 3), ("stop",),
    ]  # fmt: skip
    assert prof.traces == ["trace", "trace"]

    wg = _FakeGroup()
    prof = _profiler(["actor_rollout_ref.rollout.profiler.enable=true", "global_profiler.finish_hook_cmd=ls"])
    for step in (1, 3):
        with prof.step(step, {"actor_rollout": wg}):
            wg.generate_sequences(0), wg.update_actor(0)
    traced = [e for e in wg.log if e[0] == "start"]
    assert traced == [("start", "generate_sequences", 1), ("start", "generate_sequences", 3)]
    assert wg.log[-1] == ("hook", "ls") and sum(e[0] == "hook" for e in wg.log) == 1, "hook once, after step 3"


def test_whole_step_trace_and_no_role_enabled_traces_nothing() -> None:
    wg = _FakeGroup()
    with _profiler(["critic.profiler.enable=true"]).step(1, {"actor_rollout": wg}):
        wg.update_actor(0)
    assert wg.log == [("update_actor", 0)], "only the critic is enabled and there is no critic group"
    nothing = _profiler([])
    assert not nothing.enabled and not _profiler(["actor_rollout_ref.actor.profiler.enable=true"]).plans[0].calls
    wg = _FakeGroup()
    with _profiler(["actor_rollout_ref.ref.profiler.enable=true"]).step(3, {"actor_rollout": wg}):
        wg.update_actor(0)
    assert wg.log == [("start", None, 3), ("update_actor", 0), ("stop",)]


def test_worker_trace_ranks_layout_and_one_trace_per_process(tmp_path: Path) -> None:
    spec = {"tool": "torch", "role": "critic", "step": 4, "through": None, "stage": None, "ranks": [1],
            "contents": [], "save_path": str(tmp_path), "relocate_results": False}  # fmt: skip
    assert not start_worker_trace(0, spec), "rank 0 is not traced"
    assert start_worker_trace(1, spec)
    assert not start_worker_trace(1, dict(spec, role="actor_rollout")), "one trace per process"
    assert stop_worker_trace(0) is None
    path = stop_worker_trace(1)
    assert path == str(tmp_path / "critic" / "step4_rank1.json") and os.path.isfile(path)
    assert worker_trace_path(dict(spec, relocate_results=True, stage="update_critic"), 1) == str(
        tmp_path / "critic_step4_update_critic_rank1.json"
    )


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["global_profiler.tool=npu", "global_profiler.profile_continuous_steps=true"], "global_profiler.tool=npu: "),
        (["global_profiler.tool=nsys", "trainer.device=cpu"], "global_profiler.tool=nsys with trainer.device=cpu"),
        (["critic.profiler.tool=torch_memory", "trainer.device=cpu"], "critic.profiler.tool=torch_memory with"),
        (["global_profiler.global_tool_config.torch_memory.context=none"], "torch_memory.context=none: use one of"),
        (["actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active=2"], "schedule (sub-sampling"),
        (["actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_start=5"], "token window"),
        (["critic.profiler.tool_config.torch.contents=[gpu]"], "['gpu'] are not torch.profiler contents"),
    ],
)
def test_refused_profiler_values_are_one_line(overrides: list[str], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides)
    problems = [ln for ln in str(info.value).splitlines() if ln.strip().startswith("- ")]
    assert len(problems) == 1 and line in problems[0], str(info.value)


def test_a_hand_built_config_without_profiler_sections_traces_nothing() -> None:
    from omegaconf import OmegaConf

    assert not RoleProfiler.from_config(OmegaConf.create({"trainer": {"nnodes": 1}})).enabled
