"""Resume equality: a run stopped after step k and resumed reproduces the uninterrupted run's steps k+1.. .

Tiny random Llama with the byte tokenizer, fp32, local backend, GRPO and PPO with a critic, sampling at temperature
1, shuffled data, two optimizer steps per PPO step and a cosine lr schedule, so every piece of state (rollout seeds,
data order, weights, optimizer moments, schedulers, critic) has to be restored for the metrics to match. The first
process "dies" inside step 3 (an exception), after the step-2 checkpoint. Timing, throughput and memory metrics are
excluded: they measure the machine, not the algorithm.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from omegaconf import DictConfig

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.runner import run_ppo

# A reward the tiny random model reaches by chance about a quarter of the time with 2-token responses: the share
# of cleanly decoded ASCII characters (the byte tokenizer decodes a response with any stray high byte as U+FFFD
# replacement characters only).
REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if not solution_str:
        return 0.0
    return sum(1 for ch in solution_str if ord(ch) < 128) / len(solution_str)
"""

# metrics that depend on the wall clock or the process, not on the training state
_MACHINE_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/")


class _SimulatedCrash(RuntimeError):
    """Stands in for the process being killed."""


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("resume_task")
    train, test = generate_arithmetic_splits(train_size=24, test_size=4, seed=3)
    write_parquet(train, str(root / "train.parquet"))
    write_parquet(test, str(root / "test.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "val": str(root / "test.parquet"), "reward": str(root / "reward.py")}


def _config(model_dir: str, files: dict[str, str], out_dir: Path, extra: list[str]) -> DictConfig:
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={files['train']}",
        f"data.val_files={files['val']}",
        f"custom_reward_function.path={files['reward']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=128",
        "data.max_response_length=4",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",  # two optimizer steps per PPO step: Adam state matters
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        # a schedule whose value depends on the step, so a scheduler that restarts would show in actor/lr
        "actor_rollout_ref.actor.optim.warmup_style=cosine",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=1",
        "trainer.total_training_steps=4",
        "trainer.test_freq=2",
        "trainer.val_before_train=true",
        "trainer.logger=[file]",
        "trainer.export_hf=false",
        "trainer.plot=false",
        f"trainer.default_local_dir={out_dir}",
    ]
    return load_config(overrides + extra)


def _per_step_metrics(log_file: Path) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    for line in log_file.read_text().splitlines():
        record = json.loads(line)
        metrics = {k: v for k, v in record["metrics"].items() if not k.startswith(_MACHINE_PREFIXES)}
        steps.setdefault(int(record["step"]), {}).update(metrics)
    return steps


@pytest.mark.parametrize("adv_estimator", ["grpo", "gae"])
def test_resumed_run_matches_uninterrupted_run(
    tiny_model_dir: str,
    task_files: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    adv_estimator: str,
) -> None:
    algo = [
        f"algorithm.adv_estimator={adv_estimator}",
        "critic.dtype=float32",
        "critic.optim.lr=1e-2",
        "critic.ppo_micro_batch_size_per_gpu=8",
    ]
    full_dir = tmp_path / "full"
    run_ppo(
        _config(tiny_model_dir, task_files, full_dir, algo + ["trainer.resume_mode=disable", "trainer.save_freq=0"])
    )

    part_dir = tmp_path / "part"
    part_cfg = algo + ["trainer.resume_mode=auto", "trainer.save_freq=2"]
    # The first process dies in the middle of step 3, after step 2 was checkpointed: same config, same step
    # budget (the lr schedule's horizon depends on it), only the crash differs.
    real_train_step = RayPPOTrainer.train_step

    def crash_in_step_3(self: RayPPOTrainer, batch):
        if self.global_steps == 3:
            raise _SimulatedCrash("killed during step 3")
        return real_train_step(self, batch)

    with monkeypatch.context() as patch:
        patch.setattr(RayPPOTrainer, "train_step", crash_in_step_3)
        with pytest.raises(_SimulatedCrash):
            run_ppo(_config(tiny_model_dir, task_files, part_dir, part_cfg))
    assert (part_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    # a new trainer with the same config picks the checkpoint up by itself (resume_mode=auto)
    run_ppo(_config(tiny_model_dir, task_files, part_dir, part_cfg))

    full = _per_step_metrics(full_dir / "logs" / "metrics.jsonl")
    resumed = _per_step_metrics(part_dir / "logs" / "metrics.jsonl")
    assert sorted(full) == [0, 1, 2, 3, 4]
    assert sorted(resumed) == [0, 1, 2, 3, 4]
    # the second process really resumed: it logged steps 3 and 4 only (no second step 0 validation, no step 1 again)
    logged = [json.loads(line)["step"] for line in (part_dir / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [0, 1, 2, 3, 4]
    compared = ["critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/lr", "response_length/mean"]
    if adv_estimator == "gae":
        compared += ["critic/vf_loss", "critic/values/mean"]
    for step in (3, 4):
        assert set(full[step]) == set(resumed[step])
        for key in compared:
            assert key in full[step], key
        for key, value in full[step].items():
            # same arithmetic in the same order on the same machine: equal up to float32 rounding
            assert resumed[step][key] == pytest.approx(value, rel=1e-5, abs=1e-6), (step, key)
    assert os.path.isdir(part_dir / "global_step_4" / "actor")
