"""A trajectory whose agent rewrote its history trains on every segment: one PPO step of the synchronous and of the
one-step-off asynchronous trainer with ``openai_agent`` (``train_segments: all``) on the tiny model; the batch grows
by the extra rows, each copies its prompt's columns, the reward is the trajectory's on every row, and GRPO's
advantage comes from each trajectory's final row, broadcast to its other row."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest
import torch

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.runner import run_ppo

pytest.importorskip("openai")

AGENTS = os.path.join(os.path.dirname(__file__), "agents_for_tests.py")
REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n"


def _run(tiny_model_dir: str, tmp_path: Any, monkeypatch: Any, extra: list[str]) -> tuple[Any, dict[str, float]]:
    """One step; returns the batch the update ran on and the step's metrics."""
    train, test = generate_arithmetic_splits(train_size=4, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    (tmp_path / "reward.py").write_text(REWARD)
    out = tmp_path / "out"
    batches = []
    update_stage = RayPPOTrainer.update_stage

    def spy(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        batches.append(update_stage(self, batch, *args, **kwargs))
        return batches[-1]

    monkeypatch.setattr(RayPPOTrainer, "update_stage", spy)
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={tmp_path / 'train.parquet'}",
            f"data.val_files={tmp_path / 'test.parquet'}",
            f"custom_reward_function.path={tmp_path / 'reward.py'}",
            "data.train_batch_size=2",
            "data.max_prompt_length=128",
            "data.max_response_length=32",
            "data.return_raw_chat=true",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.agent.default_agent_loop=openai_agent",
            f"actor_rollout_ref.rollout.agent.openai.agent={AGENTS}:rewrites_after_a_turn",
            "actor_rollout_ref.rollout.agent.openai.timeout_s=120",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.rollout.dtype=float32",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=1",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            f"trainer.default_local_dir={out}",
            *extra,
        ]
    )
    run_ppo(cfg)
    (record,) = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return batches[-1], record["metrics"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "one_step_off"])
def test_every_segment_of_a_split_trajectory_is_trained(tiny_model_dir: str, tmp_path, monkeypatch, mode) -> None:
    extra = ["async_training.mode=one_step_off"] if mode != "sync" else []
    batch, metrics = _run(tiny_model_dir, tmp_path, monkeypatch, extra)
    nt = batch.non_tensor_batch
    assert len(batch) == 8  # 2 prompts x 2 trajectories x 2 segments
    assert metrics["agent/openai/splits/mean"] == 1.0 and metrics["agent/openai/trained_segments/mean"] == 2.0
    assert metrics["agent/segment_rows"] == 4.0 and metrics["agent/openai/failed/mean"] == 0.0
    assert "actor/pg_loss" in metrics
    keys = {(nt["uid"][i], int(nt["session_id"][i])): [] for i in range(len(batch))}
    for i in range(len(batch)):
        keys[(nt["uid"][i], int(nt["session_id"][i]))].append(i)
    assert len(keys) == 4 and all(len(rows) == 2 for rows in keys.values())
    adv, mask = batch.batch["advantages"], batch.batch["response_mask"]
    scores = batch.batch["token_level_scores"].sum(-1)
    finals = {}
    for rows in keys.values():
        final, other = sorted(rows, key=lambda i: int(nt["segment_index"][i]))[::-1]
        finals[final] = rows
        # each segment row copies its prompt's columns, shares the trajectory's reward and its final row's advantage
        assert nt["data_source"][other] == nt["data_source"][final] and nt["index"][other] == nt["index"][final]
        assert nt["agent_reward"][other] == nt["agent_reward"][final] and scores[other] == scores[final]
        value = adv[final][mask[final].bool()][0]
        torch.testing.assert_close(adv[other], value * mask[other].float())
        torch.testing.assert_close(adv[final], value * mask[final].float())
        assert mask[other].sum() > 0
    # GRPO over the final rows: per prompt, (score - group mean) / (group std + eps)
    for uid in set(nt["uid"].tolist()):
        group = [i for i in finals if nt["uid"][i] == uid]
        s = scores[group]
        expected = (s - s.mean()) / (s.std() + 1e-6)
        got = torch.stack([adv[i][mask[i].bool()][0] for i in group])
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert np.isclose(metrics["agent/reward/mean"], float(np.mean([nt["agent_reward"][i] for i in finals])))
