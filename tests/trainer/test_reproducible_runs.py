"""Same command, same numbers: two runs of ``main_ppo`` with the same seed log identical metrics at every step.

A tiny random Llama on the ``hf`` engine, 3 GRPO steps of 4 prompts x 2 responses with a reward that varies (so the
policy moves and step 2 depends on step 1's update), run twice in this process. Everything but wall-clock figures
(``timing_s/*``, ``timing_per_token_ms/*``, ``perf/*``) must match to the last bit.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer import main_ppo

# a reward that differs between responses: the fraction of ASCII characters
REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ord(ch) < 128) / len(solution_str) if solution_str else 0.0
"""
CLOCK_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("repro_task")
    train, test = generate_arithmetic_splits(train_size=16, test_size=2, seed=4)
    write_parquet(train, str(root / "train.parquet"))
    write_parquet(test, str(root / "test.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "val": str(root / "test.parquet"), "reward": str(root / "reward.py")}


def _run(model_dir: str, task: dict[str, str], out: Path) -> dict[int, dict[str, float]]:
    code = main_ppo.main(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            f"data.train_files={task['train']}",
            f"data.val_files={task['val']}",
            f"custom_reward_function.path={task['reward']}",
            "actor_rollout_ref.rollout.name=hf",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=4",
            "data.max_prompt_length=128",
            "data.max_response_length=6",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.optim.lr=1e-3",  # big steps: a difference in the update shows at once
            "trainer.total_training_steps=3",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=0",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            "trainer.logger=[file]",
            f"trainer.default_local_dir={out}",
        ]
    )
    assert code == 0
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: {k: v for k, v in row["metrics"].items() if not k.startswith(CLOCK_PREFIXES)} for row in rows}


def test_two_runs_with_the_same_seed_log_the_same_metrics(tiny_model_dir: str, task: dict[str, str], tmp_path: Path):
    first = _run(tiny_model_dir, task, tmp_path / "a")
    second = _run(tiny_model_dir, task, tmp_path / "b")
    assert sorted(first) == [1, 2, 3]
    # the policy moved: the check is not comparing two runs that did nothing
    assert any(abs(first[s]["actor/pg_loss"]) > 0 for s in first)
    assert first[1]["actor/grad_norm"] > 0
    assert first[3]["training/reproducible"] == 1.0
    for step in first:
        differ = {
            k: (first[step][k], second[step].get(k))
            for k in first[step]
            if not (
                first[step][k] == second[step].get(k)
                or (isinstance(first[step][k], float) and math.isnan(first[step][k]) and math.isnan(second[step][k]))
            )
        }
        assert not differ, f"step {step}: {differ}"
