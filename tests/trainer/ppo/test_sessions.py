"""Batches where a trajectory gave several rows (verl.trainer.ppo.sessions, verl.trainer.ppo.v1.utils): GRPO from
each session's final row broadcast to its other rows, the final row's score shared, padding rows that train
nothing, ReMax baselines and DAPO groups kept whole, per-trajectory agent metrics."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch

from verl.experimental.agent_loop.metrics import compute_agent_metrics
from verl.protocol import DataProto
from verl.trainer.ppo.batch_transforms import compute_advantage as plain_advantage
from verl.trainer.ppo.driver_data import collect_varied_groups
from verl.trainer.ppo.sessions import (
    baselines_per_row,
    expand_to_outputs,
    final_rows,
    pad_segment_rows,
    score_final_rows,
    session_keys,
    single_mini_batch,
)
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories


def _batch() -> DataProto:
    """Prompt a: trajectory 0 split in two rows (final reward 1), trajectory 1 one row (reward 0); prompt b: two
    one-row trajectories (rewards 2 and 4). Responses of 3 tokens."""
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0]])
    rewards = torch.zeros(5, 3)
    rewards[1, 0], rewards[3, 1], rewards[4, 0] = 1.0, 2.0, 4.0
    rewards[0, 1] = 1.0  # the first segment's shared score (ignored by GRPO: the final row decides)
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": rewards,
            "response_mask": mask,
            "responses": torch.zeros(5, 3, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(5, 2, dtype=torch.long), mask], dim=-1),
        },
        non_tensors={
            "uid": np.array(["a", "a", "a", "b", "b"], dtype=object),
            "session_id": np.array([0, 0, 1, 2, 3], dtype=object),
            "segment_index": np.array([0, 1, 0, 0, 0], dtype=object),
            "segment_count": np.array([2, 2, 1, 1, 1], dtype=object),
        },
    )


def test_grpo_from_each_sessions_final_row_broadcast_by_hand() -> None:
    batch = _batch()
    assert session_keys(batch) == ["a_0_0", "a_0_1", "a_1_0", "b_2_0", "b_3_0"]
    out = compute_advantage_for_multi_trajectories(batch, session_keys(batch), "grpo")
    # group a's finals score [1, 0]: mean 0.5, unbiased std 1/sqrt(2); group b's [2, 4]: mean 3, std sqrt(2)
    a = 0.5 / (1 / math.sqrt(2) + 1e-6)
    b = 1.0 / (math.sqrt(2) + 1e-6)
    expected = torch.tensor([[a, a, 0], [a, 0, 0], [-a, -a, -a], [-b, -b, 0], [b, 0, 0]])
    torch.testing.assert_close(out.batch["advantages"], expected)
    torch.testing.assert_close(out.batch["returns"], expected)


def test_other_estimators_are_delegated_row_by_row() -> None:
    got = compute_advantage_for_multi_trajectories(_batch(), session_keys(_batch()), "reinforce_plus_plus")
    want = plain_advantage(_batch(), "reinforce_plus_plus")
    torch.testing.assert_close(got.batch["advantages"], want.batch["advantages"])


def test_the_final_rows_are_scored_and_their_score_shared() -> None:
    batch = _batch()
    seen = []

    def score(rows: DataProto) -> tuple[torch.Tensor, dict[str, list]]:
        seen.append(rows.non_tensor_batch["segment_index"].tolist())
        scores = torch.zeros(len(rows), 3)
        scores[:, 0] = torch.tensor([10.0, 20.0, 30.0, 40.0])
        return scores, {"acc": [1, 2, 3, 4], "reward/calls": [4]}

    scores, extra = score_final_rows(batch, score)
    assert seen == [[1, 0, 0, 0]]  # one row per trajectory: the final one
    # the first segment gets its trajectory's total at its own last response token (index 1)
    torch.testing.assert_close(scores[0], torch.tensor([0.0, 10.0, 0.0]))
    torch.testing.assert_close(scores[1:, 0], torch.tensor([10.0, 20.0, 30.0, 40.0]))
    assert extra == {"acc": [1, 1, 2, 3, 4], "reward/calls": [4]}


def test_padding_rows_train_nothing_and_stay_out_of_the_metrics() -> None:
    batch = _batch()
    batch.non_tensor_batch["agent_metrics"] = np.array([{"openai/trained_segments": 2}] * 2 + [{}] * 3, dtype=object)
    padded = pad_segment_rows(batch, 4, 2)
    assert len(padded) == 8 and padded.non_tensor_batch["is_padding"].tolist() == [False] * 5 + [True] * 3
    assert padded.batch["response_mask"][5:].sum() == 0 and len(set(padded.non_tensor_batch["uid"][5:])) == 3
    assert padded.non_tensor_batch["segment_count"][5:].tolist() == [1, 1, 1]
    assert len(final_rows(padded)) == 4  # one per real trajectory
    out = compute_advantage_for_multi_trajectories(padded, session_keys(padded), "grpo")
    assert out.batch["advantages"][5:].abs().sum() == 0
    metrics = compute_agent_metrics(padded.non_tensor_batch)
    assert metrics["agent/segment_rows"] == 1.0  # 5 training rows for 4 trajectories
    assert metrics["agent/openai/trained_segments/mean"] == 0.5  # per trajectory (2, 0, 0, 0)
    assert not single_mini_batch(padded, _config(mini=2, n=2)) and single_mini_batch(padded, _config(mini=4, n=2))
    one_row_each = DataProto.from_dict(non_tensors={"uid": np.array(["x", "y"], dtype=object)})
    assert pad_segment_rows(one_row_each, 4) is one_row_each  # nothing split: unchanged


def _config(mini: int, n: int) -> SimpleNamespace:
    return SimpleNamespace(
        actor_rollout_ref=SimpleNamespace(actor=SimpleNamespace(ppo_mini_batch_size=mini), rollout=SimpleNamespace(n=n))
    )


def test_prompt_columns_follow_their_rows_and_remax_baselines_by_uid() -> None:
    rows = DataProto.from_dict(non_tensors={"data_source": np.array(["p", "q"], dtype=object)})
    outputs = DataProto.from_dict(non_tensors={"session_id": np.array([0, 0, 1], dtype=object)})
    assert expand_to_outputs(rows, outputs).non_tensor_batch["data_source"].tolist() == ["p", "p", "q"]
    baseline = DataProto.from_dict(non_tensors={"uid": np.array(["a", "b"], dtype=object)})
    got = baselines_per_row(_batch(), baseline, torch.tensor([[1.0, 2.0], [5.0, 0.0]]))
    assert got.tolist() == [3.0, 3.0, 3.0, 5.0, 5.0]


def test_dapo_keeps_whole_groups_of_segment_rows() -> None:
    batch = _batch()
    batch.batch["token_level_scores"] = batch.batch["token_level_rewards"]
    cfg = SimpleNamespace(metric="none", max_num_gen_batches=1)
    metrics: dict = {}
    kept = collect_varied_groups(batch, lambda b: b, lambda: None, cfg, 1, 2, 1, metrics)
    assert kept.non_tensor_batch["uid"].tolist() == ["a", "a", "a"]  # the first group, all its rows
