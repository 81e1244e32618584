"""End-to-end PPO-family training on a tiny random model (CPU, fp32, local backend): learning and every algorithm.

The task is trivially learnable: a custom reward function (loaded from a file through ``custom_reward_function``)
pays the share of the response's characters that are ASCII letters. A random byte is one of the 52 letters with
probability 52/259 (about 0.2), so the policy has to move its probability mass onto those bytes to score more.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from omegaconf import DictConfig

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.ppo.runner import run_ppo

REWARD_SOURCE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Share of ASCII letters in the decoded response (0 for an empty one): ~0.2 for a random byte model."""
    if not solution_str:
        return 0.0
    return sum(1 for ch in solution_str if ch.isascii() and ch.isalpha()) / len(solution_str)
'''


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Train/validation parquet files in verl's schema and the reward function file."""
    root = tmp_path_factory.mktemp("e2e_task")
    train, test = generate_arithmetic_splits(train_size=64, test_size=4, seed=1)
    write_parquet(train, str(root / "train.parquet"))
    write_parquet(test, str(root / "test.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "val": str(root / "test.parquet"), "reward": str(root / "reward.py")}


def tiny_config(model_dir: str, files: dict[str, str], out_dir: Path, extra: list[str]) -> DictConfig:
    """A fast tiny-model run: 4 prompts x n=4, 2-token responses, fp32, no validation, JSONL logging only."""
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={files['train']}",
        f"data.val_files={files['val']}",
        f"custom_reward_function.path={files['reward']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=128",  # byte tokenizer: one token per character of the chat-formatted prompt
        "data.max_response_length=2",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "critic.dtype=float32",
        "critic.optim.lr=1e-2",
        "critic.ppo_micro_batch_size_per_gpu=16",
        "trainer.total_training_steps=2",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=0",
        "trainer.logger=[file]",
        "trainer.resume_mode=disable",
        "trainer.export_hf=false",
        "trainer.plot=false",
        f"trainer.default_local_dir={out_dir}",
    ]
    return load_config(overrides + extra)


def read_steps(out_dir: Path) -> list[dict]:
    """The JSONL records of a run, in order."""
    return [json.loads(line) for line in (out_dir / "logs" / "metrics.jsonl").read_text().splitlines()]


def _scores(records: list[dict]) -> list[float]:
    return [r["metrics"]["critic/score/mean"] for r in records if "critic/score/mean" in r["metrics"]]


# 8 prompts x 4 responses per step, 15 steps: the letter share goes from about 0.2 to about 1 on this seed
LEARNING_RUN = [
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
    "critic.ppo_micro_batch_size_per_gpu=32",
    "trainer.total_training_steps=15",
    "trainer.total_epochs=2",  # 64 prompts are 8 batches per epoch
]


@pytest.mark.parametrize("adv_estimator", ["grpo", "gae"])
def test_score_of_a_learnable_reward_rises(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path, adv_estimator: str
) -> None:
    run_ppo(
        tiny_config(tiny_model_dir, task_files, tmp_path, LEARNING_RUN + [f"algorithm.adv_estimator={adv_estimator}"])
    )
    scores = _scores(read_steps(tmp_path))
    assert len(scores) == 15
    first, last = sum(scores[:3]) / 3, sum(scores[-3:]) / 3
    # a random byte is an ASCII letter with probability 52/259
    assert first < 0.5, scores
    assert last > 0.75 and last - first > 0.3, scores


def _assert_finite_run(records: list[dict], steps: int) -> dict[str, float]:
    """Every logged value finite; returns the last step's metrics."""
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    for record in records:
        assert "nonfinite" not in record, record.get("nonfinite")
        for key, value in record["metrics"].items():
            assert isinstance(value, (int, float)) and math.isfinite(value), (record["step"], key, value)
    return records[-1]["metrics"]


ALGORITHMS = {
    "rloo": ["algorithm.adv_estimator=rloo"],
    "reinforce_plus_plus": ["algorithm.adv_estimator=reinforce_plus_plus", "actor_rollout_ref.actor.use_kl_loss=true"],
    "remax": ["algorithm.adv_estimator=remax"],
    "dr_grpo": [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=false",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
    ],
    "dapo": [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "reward_model.reward_manager=dapo",
        "reward_model.overlong_buffer.enable=true",
        "reward_model.overlong_buffer.len=1",
        "reward_model.overlong_buffer.penalty_factor=1.0",
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.metric=acc",
        "algorithm.filter_groups.max_num_gen_batches=4",
        "data.gen_batch_size=2",  # rounds of 2 prompts until train_batch_size=4 groups are kept (or 4 rounds)
        "trainer.total_epochs=4",
    ],
    "grpo_kl_in_reward": ["algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=true"],
}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_algorithm_runs_two_steps_with_finite_metrics(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path, name: str
) -> None:
    run_ppo(tiny_config(tiny_model_dir, task_files, tmp_path, ALGORITHMS[name]))
    last = _assert_finite_run(read_steps(tmp_path), steps=2)
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "critic/score/mean", "critic/advantages/mean"):
        assert key in last, key
    if name == "remax":
        assert last["timing_s/gen_max"] > 0  # the greedy baseline generation ran
    if name == "reinforce_plus_plus":
        assert "actor/kl_loss" in last
    if name == "dr_grpo":
        # no division by the group std: advantages are differences of scores in [0, 1]
        assert -1.0 <= last["critic/advantages/min"] <= last["critic/advantages/max"] <= 1.0
    if name == "dapo":
        assert last["train/num_gen_batches"] >= 2  # rounds of data.gen_batch_size=2 prompts for 4 groups
        assert last["train/num_kept_groups"] >= 1
        # scores are in [0, 1]; only the overlong penalty (-1 for a full 2-token response here) makes them negative
        assert last["critic/score/min"] < 0
    if name == "grpo_kl_in_reward":
        assert last["actor/reward_kl_penalty_coeff"] == pytest.approx(0.001)


def test_async_reward_scoring_gives_the_same_run(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path
) -> None:
    """Scoring in a background thread (reward_model.launch_reward_fn_async) changes when, not what, is computed."""
    runs = {}
    for mode in ("false", "true"):
        out = tmp_path / f"async_{mode}"
        run_ppo(tiny_config(tiny_model_dir, task_files, out, [f"reward_model.launch_reward_fn_async={mode}"]))
        runs[mode] = read_steps(out)
    for sync_record, async_record in zip(runs["false"], runs["true"], strict=True):
        for key in ("critic/score/mean", "critic/advantages/min", "actor/pg_loss", "actor/grad_norm"):
            assert async_record["metrics"][key] == pytest.approx(sync_record["metrics"][key], rel=1e-6), key


def test_on_policy_shortcut_skips_the_old_log_prob_forward_and_keeps_the_update(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path
) -> None:
    """With one epoch over one mini-batch, skipping the old-log-prob forward changes the time, not the run: same
    rollouts (same seeds), same loss and gradient norm (the PPO ratio is 1 either way, up to recomputation
    rounding), and the skipped run reports a KL of exactly 0 between behaviour and current policy."""
    runs = {}
    for skip in ("true", "false"):
        out = tmp_path / f"skip_{skip}"
        run_ppo(
            tiny_config(
                tiny_model_dir, task_files, out, [f"actor_rollout_ref.actor.skip_old_log_prob_on_policy={skip}"]
            )
        )
        runs[skip] = [r["metrics"] for r in read_steps(out) if "timing_s/step" in r["metrics"]]
    assert len(runs["true"]) == len(runs["false"]) == 2
    assert all("timing_s/old_log_prob" not in m for m in runs["true"])
    assert all("timing_s/old_log_prob" in m for m in runs["false"])
    for fast, full in zip(runs["true"], runs["false"], strict=True):
        assert fast["critic/score/mean"] == full["critic/score/mean"]
        assert fast["response_length/mean"] == full["response_length/mean"]
        assert fast["actor/pg_loss"] == pytest.approx(full["actor/pg_loss"], abs=1e-5)
        assert fast["actor/grad_norm"] == pytest.approx(full["actor/grad_norm"], rel=1e-4)
        assert fast["actor/ppo_kl"] == 0.0


def test_profiling_and_debug_switches_write_traces_and_dumps(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path
) -> None:
    """trainer.enable_profiling writes a torch.profiler trace for exactly the configured steps; enable_debug_mode
    writes a per-step dump of the batch's tensors and the metrics. Both are off by default."""
    out = tmp_path / "switches"
    run_ppo(
        tiny_config(
            tiny_model_dir,
            task_files,
            out,
            ["trainer.enable_profiling=true", "trainer.profile_steps=[2]", "trainer.enable_debug_mode=true"],
        )
    )
    assert sorted(os.listdir(out / "profile")) == ["step_2.json"]
    trace = json.loads((out / "profile" / "step_2.json").read_text())
    assert trace["traceEvents"], "the chrome trace has events"
    assert sorted(os.listdir(out / "debug")) == ["step_1.json", "step_2.json"]
    dump = json.loads((out / "debug" / "step_1.json").read_text())
    assert "responses" in json.dumps(dump) and "actor/pg_loss" in json.dumps(dump)
    import torch

    assert not torch.is_anomaly_enabled(), "debug mode's anomaly detection must end with the run"

    quiet = tmp_path / "defaults"
    run_ppo(tiny_config(tiny_model_dir, task_files, quiet, []))
    assert not (quiet / "profile").exists() and not (quiet / "debug").exists()
