"""The ``dapo`` reward-loop manager: the sample's score plus DAPO's soft overlong penalty.

The penalty is :func:`verl.workers.reward_manager.dapo.overlong_penalty` (DAPO, Yu et al. 2025, overlong reward
shaping), the same as the ``dapo`` reward manager's; its settings come from ``config.reward.reward_kwargs``
(``overlong_buffer_cfg``: ``enable``, ``len``, ``penalty_factor``, ``log``; ``max_resp_len``).
"""

from __future__ import annotations

from typing import Any

from verl.base_config import omega_conf_to_dataclass
from verl.experimental.reward_loop.reward_manager.base import (
    RawRewardFn,
    RewardManagerBase,
    refuse_reward_model_kwargs,
)
from verl.experimental.reward_loop.reward_manager.registry import register
from verl.protocol import DataProto
from verl.sections.reward_model import OverlongBufferConfig
from verl.workers.reward_manager.dapo import check_overlong_buffer, overlong_penalty

__all__ = ["DAPORewardManager"]


def _reward_kwargs(config: Any) -> dict[str, Any]:
    reward = config["reward"] if "reward" in config else None
    if reward is None or "reward_kwargs" not in reward or reward["reward_kwargs"] is None:
        return {}
    return dict(reward["reward_kwargs"])


@register("dapo")
class DAPORewardManager(RewardManagerBase):
    """Score the last row, then (with ``overlong_buffer_cfg.enable``) add the overlong penalty for its valid response
    length. ``reward_extra_info`` has the reward function's extras (``acc`` for a plain number) and, with ``log``,
    ``overlong_reward`` and ``overlong``. An enabled buffer needs ``max_resp_len >= len > 0`` (checked here)."""

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
        reward_kwargs = _reward_kwargs(config)
        self.overlong_buffer_cfg = omega_conf_to_dataclass(
            reward_kwargs.get("overlong_buffer_cfg"), OverlongBufferConfig
        )  # absent: the defaults (off)
        self.max_resp_len = reward_kwargs.get("max_resp_len")
        check_overlong_buffer(self.max_resp_len, self.overlong_buffer_cfg)

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """``{"reward_score", "reward_extra_info"}`` of the last row of ``data``, penalty included."""
        score, extra, valid = await self.score_last_row(data)
        overlong = self.overlong_buffer_cfg
        if overlong.enable:
            penalty = overlong_penalty(valid, int(self.max_resp_len), overlong.len, overlong.penalty_factor)
            score += penalty
            if overlong.log:
                extra["overlong_reward"] = penalty
                extra["overlong"] = penalty < 0
        return {"reward_score": score, "reward_extra_info": extra}
