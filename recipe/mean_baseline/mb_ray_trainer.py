"""The recipe's trainer: verl's ``RayPPOTrainer`` with its rollout stage extended."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import torch

from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer


def distinct_response_fraction(responses: torch.Tensor, uids: Any) -> float:
    """Mean over prompt groups of (distinct responses in the group) / (responses in the group).

    ``responses``: ``[bs, response_len]`` token ids; ``uids``: ``[bs]`` group ids. 1.0 means no duplicates.
    """
    groups: dict[Any, list[tuple[int, ...]]] = {}
    for row, uid in zip(responses.tolist(), uids):
        groups.setdefault(uid, []).append(tuple(row))
    if not groups:
        return float("nan")
    return sum(len(set(rows)) / len(rows) for rows in groups.values()) / len(groups)


class MeanBaselineRayTrainer(RayPPOTrainer):
    """Logs ``recipe/distinct_response_frac`` (how varied the ``rollout.n`` samples of a prompt are) after each
    rollout, before the update."""

    def rollout_stage(
        self, batch: DataProto, timing: dict[str, float], metrics: dict[str, Any]
    ) -> tuple[DataProto, Future | None]:
        batch, reward_future = super().rollout_stage(batch, timing, metrics)
        metrics["recipe/distinct_response_frac"] = distinct_response_fraction(
            batch.batch["responses"], batch.non_tensor_batch["uid"]
        )
        return batch, reward_future
