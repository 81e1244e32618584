"""The ``naive`` reward-loop manager: one reward-function call per sample."""

from __future__ import annotations

from typing import Any

from verl.experimental.reward_loop.reward_manager.base import (
    RawRewardFn,
    RewardManagerBase,
    refuse_reward_model_kwargs,
)
from verl.experimental.reward_loop.reward_manager.registry import register
from verl.protocol import DataProto

__all__ = ["NaiveRewardManager"]


@register("naive")
class NaiveRewardManager(RewardManagerBase):
    """``compute_score(data_source, solution_str, ground_truth, extra_info)`` on the sample's last row; the row's
    ``__num_turns__`` and ``reward_scores`` (scores the rollout recorded) are added to ``extra_info`` as
    ``num_turns`` and ``rollout_reward_scores``, as verl's naive reward-loop manager passes them."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: RawRewardFn,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
    ) -> None:
        refuse_reward_model_kwargs(type(self).__name__, reward_router_address, reward_model_tokenizer)
        super().__init__(config, tokenizer, compute_score)

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """``{"reward_score", "reward_extra_info"}`` of the last row of ``data``."""
        ntb = data[len(data) - 1].non_tensor_batch
        turns = {"num_turns": ntb.get("__num_turns__"), "rollout_reward_scores": ntb.get("reward_scores") or {}}
        score, extra, _ = await self.score_last_row(data, turns)
        return {"reward_score": score, "reward_extra_info": extra}
