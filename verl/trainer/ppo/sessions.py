"""Rollout batches whose trajectories gave several training rows (upstream v0.9's multi-output agent loops).

An agent loop may return several outputs for one trajectory (``openai_agent`` with
``rollout.agent.openai.train_segments=all``: one per *segment* of a trajectory whose agent rewrote its history,
docs/any_agent.md). The agent-loop runner then tags every row of its output with three non-tensor columns:

- ``session_id`` (int): the trajectory, as its row in the generation batch (unique within one generation call;
  with the group id ``uid`` it names the trajectory across concatenated batches);
- ``segment_index`` (int): the row's position in its trajectory, oldest first;
- ``segment_count`` (int): the trajectory's number of rows. The row with ``segment_index == segment_count - 1`` is
  the trajectory's *final* output: the one its reward is about.

Upstream names a row ``{uid}_{session_id}_{index}`` (``verl/trainer/ppo/v1/agent_loop_tq.py``);
:func:`session_keys` forms these keys for :func:`verl.trainer.ppo.v1.utils.compute_advantage_for_multi_trajectories`.
A batch grown by segment rows may not split evenly over the data-parallel ranks: :func:`pad_with_masked_rows` adds
rows that train nothing (``response_mask`` 0, marked ``is_padding``), as upstream's
``verl/trainer/ppo/padding_utils.py`` does.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto

__all__ = [
    "PADDING",
    "baselines_per_row",
    "SEGMENT_COUNT",
    "SEGMENT_INDEX",
    "SESSION_ID",
    "expand_to_outputs",
    "final_mask",
    "final_rows",
    "has_segment_rows",
    "metric_rows",
    "multi_trajectory_advantage",
    "pad_segment_rows",
    "pad_with_masked_rows",
    "score_final_rows",
    "session_keys",
    "single_mini_batch",
    "without_padding",
]

SESSION_ID = "session_id"
SEGMENT_INDEX = "segment_index"
SEGMENT_COUNT = "segment_count"
PADDING = "is_padding"


def _has_sessions(batch: DataProto) -> bool:
    return all(k in batch.non_tensor_batch for k in (SESSION_ID, SEGMENT_INDEX, SEGMENT_COUNT))


def has_segment_rows(batch: DataProto) -> bool:
    """Whether some trajectory of ``batch`` gave more than one row (or the batch holds padding rows)."""
    if PADDING in batch.non_tensor_batch and bool(np.any(batch.non_tensor_batch[PADDING].astype(bool))):
        return True
    if not _has_sessions(batch):
        return False
    return bool(np.any(np.asarray(batch.non_tensor_batch[SEGMENT_COUNT], dtype=np.int64) > 1))


def final_mask(batch: DataProto) -> np.ndarray:
    """``[rows]`` bool: the rows that are their trajectory's final output (every row of a batch without the
    session columns; a padding row is its own final output)."""
    if not _has_sessions(batch):
        return np.ones(len(batch), dtype=bool)
    index = np.asarray(batch.non_tensor_batch[SEGMENT_INDEX], dtype=np.int64)
    count = np.asarray(batch.non_tensor_batch[SEGMENT_COUNT], dtype=np.int64)
    return index == count - 1


def metric_rows(batch: DataProto) -> np.ndarray:
    """``[rows]`` bool: one row per real trajectory (its final output, padding left out), the rows per-trajectory
    metrics and validation scores are about."""
    keep = final_mask(batch)
    if PADDING in batch.non_tensor_batch:
        keep &= ~batch.non_tensor_batch[PADDING].astype(bool)
    return keep


def final_rows(batch: DataProto) -> DataProto:
    """``batch`` with one row per trajectory (:func:`metric_rows`); ``batch`` itself when that is every row."""
    keep = metric_rows(batch)
    return batch if bool(keep.all()) else batch.select_idxs(keep)


def without_padding(batch: DataProto) -> DataProto:
    """``batch`` without the rows :func:`pad_with_masked_rows` added (``batch`` itself when it has none)."""
    if PADDING not in batch.non_tensor_batch:
        return batch
    real = ~batch.non_tensor_batch[PADDING].astype(bool)
    return batch if bool(real.all()) else batch.select_idxs(real)


def session_keys(batch: DataProto) -> list[str]:
    """Upstream's row keys ``{uid}_{session_id}_{segment_index}`` (a batch without the session columns: each row
    its own session, ``{uid}_{row}_0``)."""
    uids = batch.non_tensor_batch["uid"]
    if not _has_sessions(batch):
        return [f"{uids[i]}_{i}_0" for i in range(len(batch))]
    sid, idx = batch.non_tensor_batch[SESSION_ID], batch.non_tensor_batch[SEGMENT_INDEX]
    return [f"{uids[i]}_{int(sid[i])}_{int(idx[i])}" for i in range(len(batch))]


def expand_to_outputs(rows: DataProto, outputs: DataProto) -> DataProto:
    """The rows of the generation batch (``rows``, one per trajectory) repeated to line up with the engine's
    ``outputs``: row ``outputs.session_id[j]`` for output ``j`` (every non-tensor field copied: ``uid``,
    ``data_source``, ``reward_model``, ...). ``rows`` itself when the outputs are one per row."""
    if SESSION_ID not in outputs.non_tensor_batch or len(outputs) == len(rows):
        if len(outputs) != len(rows):
            raise ValueError(f"the rollout gave {len(outputs)} rows for {len(rows)} prompts and no session_id column")
        return rows
    parent = np.asarray(outputs.non_tensor_batch[SESSION_ID], dtype=np.int64)
    if parent.size and (parent.min() < 0 or parent.max() >= len(rows)):
        raise ValueError(f"session_id out of range [0, {len(rows)}): {parent.min()}..{parent.max()}")
    return rows.select_idxs(parent)


def score_final_rows(
    batch: DataProto, score: Callable[[DataProto], tuple[torch.Tensor, dict[str, list[Any]]]]
) -> tuple[torch.Tensor, dict[str, list[Any]]]:
    """Score one row per trajectory and share it: ``score`` sees the final rows only (the conversation the reward
    is about), and each other row of a trajectory gets its final row's summed score at its own last response token
    (where reward managers put an outcome score); per-row extras are copied the same way.

    Returns ``(scores [rows, response_len], extras)`` for the whole ``batch``."""
    if not has_segment_rows(batch):
        return score(batch)
    final = final_mask(batch)
    final_idx = np.flatnonzero(final)
    keys = session_keys(batch)
    trajectory = [k.rsplit("_", 1)[0] for k in keys]
    position = {trajectory[i]: p for p, i in enumerate(final_idx)}
    missing = [keys[i] for i in range(len(batch)) if trajectory[i] not in position]
    if missing:
        raise ValueError(f"rows without their trajectory's final row in the batch: {missing[:3]}")
    source = np.array([position[t] for t in trajectory], dtype=np.int64)
    final_scores, extra = score(batch.select_idxs(final_idx))
    response_len = batch.batch["responses"].shape[-1]
    last = (batch.batch["attention_mask"][:, -response_len:].sum(-1).clamp(min=1) - 1).to(final_scores.device)
    scores = torch.zeros((len(batch), response_len), dtype=final_scores.dtype, device=final_scores.device)
    totals = final_scores.sum(-1)[torch.from_numpy(source).to(final_scores.device)]
    scores[torch.arange(len(batch), device=scores.device), last] = totals
    # the final rows keep their own token-level scores (a reward manager may spread them over tokens)
    scores[torch.from_numpy(final_idx).to(scores.device)] = final_scores
    shared = {}
    for key, values in extra.items():
        if not key.startswith("reward/") and len(values) == len(final_idx):
            shared[key] = [values[s] for s in source]
        else:
            shared[key] = values
    return scores, shared


def pad_with_masked_rows(batch: DataProto, divisor: int) -> tuple[DataProto, int]:
    """Append rows so ``len(batch) % divisor == 0``: copies of the last row that train nothing (``response_mask``
    0, scores 0, a group id ``uid`` and ``session_id`` of their own, ``is_padding`` True). Every row gets the
    ``is_padding`` column. Returns ``(batch, pad_size)``."""
    n = len(batch)
    pad = (-n) % max(int(divisor), 1)
    flags = np.zeros(n + pad, dtype=bool)
    flags[n:] = True
    if pad == 0:
        batch.non_tensor_batch.setdefault(PADDING, flags.astype(object))
        return batch, 0
    if "response_mask" not in batch.batch.keys():  # made explicit so the padding rows' zeros are what trains
        response_len = batch.batch["responses"].shape[-1]
        batch.batch["response_mask"] = batch.batch["attention_mask"][:, -response_len:].clone()
    extra = batch.select_idxs(np.full(pad, n - 1))
    extra = DataProto(extra.batch.clone(), {k: v.copy() for k, v in extra.non_tensor_batch.items()}, {})
    for key in ("response_mask", "token_level_scores", "token_level_rewards"):
        if key in extra.batch.keys():
            extra.batch[key] = torch.zeros_like(extra.batch[key])
    extra.non_tensor_batch["uid"] = np.array([f"padding-{uuid.uuid4()}" for _ in range(pad)], dtype=object)
    if _has_sessions(batch):
        extra.non_tensor_batch[SESSION_ID] = np.array([-1 - k for k in range(pad)], dtype=object)
        extra.non_tensor_batch[SEGMENT_INDEX] = np.zeros(pad, dtype=np.int64).astype(object)
        extra.non_tensor_batch[SEGMENT_COUNT] = np.ones(pad, dtype=np.int64).astype(object)
    if "agent_reward" in extra.non_tensor_batch:
        extra.non_tensor_batch["agent_reward"] = np.zeros(pad).astype(object)
    batch.non_tensor_batch[PADDING] = flags[:n].astype(object)
    extra.non_tensor_batch[PADDING] = flags[n:].astype(object)
    return DataProto.concat([batch, extra], meta_info_conflicts="first"), pad


def pad_segment_rows(batch: DataProto, *world_sizes: int) -> DataProto:
    """A batch grown by segment rows, padded (:func:`pad_with_masked_rows`) to split evenly over every group of
    ``world_sizes`` (the actor's, the critic's); any other batch unchanged."""
    if not has_segment_rows(batch):
        return batch
    return pad_with_masked_rows(batch, math.lcm(*(max(int(w), 1) for w in world_sizes)))[0]


def single_mini_batch(batch: DataProto, config: Any) -> bool:
    """Whether the actor update of ``batch`` is one mini-batch, as an on-policy update (no old-log-prob pass) needs:
    a batch grown by segment rows holds ``actor.ppo_mini_batch_size * rollout.n`` rows per mini-batch, so it may
    hold several (``config``: the run's whole config). Any other batch: True (the config decided)."""
    if not has_segment_rows(batch):
        return True
    arr = config.actor_rollout_ref
    return len(batch) <= int(arr.actor.ppo_mini_batch_size) * int(arr.rollout.n)


def multi_trajectory_advantage(batch: DataProto, algorithm: Any) -> DataProto:
    """``advantages``/``returns`` of a batch with segment rows:
    :func:`verl.trainer.ppo.v1.utils.compute_advantage_for_multi_trajectories` over :func:`session_keys`, with the
    ``algorithm`` section's estimator, ``gamma``, ``lam`` and ``norm_adv_by_std_in_grpo``."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    return compute_advantage_for_multi_trajectories(
        batch,
        session_keys(batch),
        algorithm.adv_estimator,
        gamma=float(algorithm.gamma),
        lam=float(algorithm.lam),
        norm_adv_by_std_in_grpo=bool(algorithm.norm_adv_by_std_in_grpo),
        config=algorithm,
    )


def baselines_per_row(rollouts: DataProto, baseline: DataProto, baseline_scores: torch.Tensor) -> torch.Tensor:
    """ReMax's ``reward_baselines [rows]``: the summed score of the greedy rollout of each row's prompt (``uid``);
    row for row when both batches line up, else looked up by ``uid`` (segment rows)."""
    totals = baseline_scores.sum(dim=-1)
    if len(baseline) == len(rollouts) and not has_segment_rows(rollouts) and not has_segment_rows(baseline):
        return totals
    by_uid: dict[Any, torch.Tensor] = {}
    for uid, total in zip(baseline.non_tensor_batch["uid"], totals, strict=True):
        by_uid.setdefault(uid, total)
    return torch.stack([by_uid[uid] for uid in rollouts.non_tensor_batch["uid"]])
