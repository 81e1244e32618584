"""Kill -9 and resume in every trainer mode (issue 34, item 4): a child process runs PPO and SIGKILLs itself at a
chosen point of a step (verl/trainer/ppo/kill_resume.py), the same command resumes it in this process, and the end
is compared with an uninterrupted run of the same config.

- synchronous, synchronous multi-turn agent loops, synchronous LoRA, fully asynchronous at staleness 0: the final
  weights and optimizer state are bit-identical, and so is the consumed data order;
- one-step-off and fully asynchronous at staleness 1: the consumed data order is identical (no prompt lost or
  repeated); the batch that was in flight at the kill is generated again, from the same prompts with the same seed,
  by the resumed weights, so it is fresher than in the uninterrupted run (staleness 0 instead of 1) and the final
  weights differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl.trainer.config import load_config
from verl.trainer.ppo.kill_resume import final_state, run_killed
from verl.trainer.ppo.runner import run_ppo
from verl.utils.dataset.arithmetic import generate_arithmetic_splits, write_parquet

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ch.isdigit()) / max(len(solution_str), 1)
"""
STEPS = 4

MODES = {
    "sync": [],
    "multi_turn": [
        "data.return_raw_chat=true",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    ],
    "lora": [
        "actor_rollout_ref.model.lora_rank=4",
        "actor_rollout_ref.model.lora_alpha=8",
        "actor_rollout_ref.model.target_modules=all-linear",
    ],
    "fully_async_s0": ["async_training.mode=fully_async", "async_training.staleness_threshold=0"],
    "one_step_off": ["async_training.mode=one_step_off"],
    "fully_async_s1": [
        "async_training.mode=fully_async",
        "async_training.staleness_threshold=1",
        "async_training.partial_rollout=true",
    ],
}


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("resume_modes_task")
    train, _ = generate_arithmetic_splits(train_size=16, test_size=2, seed=3)
    write_parquet(train, str(root / "train.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "reward": str(root / "reward.py")}


def _overrides(model: str, task: dict[str, str], out: Path, mode: str, save_freq: int = 1) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={task['train']}",
        f"custom_reward_function.path={task['reward']}",
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.seed=5",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        f"trainer.total_training_steps={STEPS}",
        "trainer.torch_threads=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"trainer.save_freq={save_freq}",
        "trainer.max_actor_ckpt_to_keep=10",
        "trainer.logger=[file]",
        "trainer.export_hf=false",
        "trainer.plot=false",
        "trainer.report.enable=false",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={out}",
        *MODES[mode],
    ]


def _staleness(out: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {int(r["step"]): r["metrics"]["async/staleness/max"] for r in rows if "async/staleness/max" in r["metrics"]}


def _kill_and_resume(model: str, task: dict[str, str], tmp_path: Path, mode: str, step: int, point: str):
    full_out, cut_out = tmp_path / "full", tmp_path / "cut"
    run_ppo(load_config(_overrides(model, task, full_out, mode)))
    code = run_killed(_overrides(model, task, cut_out, mode), step=step, point=point, timeout_s=300)
    assert code == -9, f"the child was not killed (exit code {code})"
    # the kill left a checkpoint before step `step` behind (and, killed mid-save, a temporary directory)
    assert final_state(str(cut_out))["step"] == step - 1
    run_ppo(load_config(_overrides(model, task, cut_out, mode)))
    return final_state(str(full_out)), final_state(str(cut_out)), full_out, cut_out


@pytest.mark.parametrize(
    ("mode", "point"), [("sync", "update"), ("multi_turn", "save"), ("lora", "rollout"), ("fully_async_s0", "rollout")]
)
def test_deterministic_modes_resume_bit_exactly(tiny_model_dir, task, tmp_path, mode, point):
    full, resumed, _, cut_out = _kill_and_resume(tiny_model_dir, task, tmp_path, mode, step=3, point=point)
    assert resumed["step"] == full["step"] == STEPS
    assert resumed["indices"] == full["indices"]  # the same prompts in the same order, none lost or repeated
    assert len(full["indices"]) == STEPS * 2
    assert resumed["digest"] == full["digest"]  # weights and optimizer state bit for bit
    assert not list(cut_out.glob(".tmp-*"))  # a save cut short by the kill was cleaned up


@pytest.mark.parametrize("mode", ["one_step_off", "fully_async_s1"])
def test_async_modes_resume_the_same_data_order(tiny_model_dir, task, tmp_path, mode):
    # killed after step 2 was logged and saved: the prompts of step 3 were already with the rollouter
    full, resumed, full_out, cut_out = _kill_and_resume(tiny_model_dir, task, tmp_path, mode, step=2, point="after")
    assert resumed["step"] == full["step"] == STEPS
    assert resumed["indices"] == full["indices"]
    # the in-flight batch was generated again by the resumed (newer) weights: fresh where it had been one step old
    assert _staleness(full_out)[3] == 1
    assert _staleness(cut_out)[3] == 0
    assert resumed["digest"] != full["digest"]
