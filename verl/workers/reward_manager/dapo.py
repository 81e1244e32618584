"""The ``dapo`` reward manager: per-sample scores plus DAPO's soft overlong penalty.

DAPO (Yu et al., 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", overlong reward shaping):
with ``L_max`` the maximum response length and a buffer of ``L_cache`` tokens before it, a response of length
``|y|`` gets ``min(-(|y| - (L_max - L_cache)) / L_cache * penalty_factor, 0)`` added to its score, i.e. nothing up
to ``L_max - L_cache`` tokens, then a linear penalty reaching ``-penalty_factor`` at ``L_max``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.base_config import omega_conf_to_dataclass
from verl.sections.reward_model import OverlongBufferConfig
from verl.workers.reward_manager.abstract import Sample
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.registry import register


class OverlongBufferError(ValueError, AssertionError):
    """A DAPO overlong-buffer setting that cannot work. A ``ValueError`` (a bad config value) and, as upstream verl
    raises ``AssertionError`` for these checks, an ``AssertionError`` too, so code written for either catches it."""


def check_overlong_buffer(max_resp_len: int | None, overlong: OverlongBufferConfig) -> None:
    """Refuse an enabled overlong buffer without ``max_resp_len`` or with ``len`` outside ``1..max_resp_len``
    (raises :class:`OverlongBufferError`); a disabled buffer needs nothing."""
    if not overlong.enable:
        return
    if max_resp_len is None:
        raise OverlongBufferError(
            "dapo reward manager: max_resp_len must be provided when overlong_buffer.enable is true "
            "(the rollout's response length, data.max_response_length)"
        )
    if overlong.len > max_resp_len:
        raise OverlongBufferError(
            f"dapo reward manager: max_resp_len must be larger than overlong_buffer.len (max_resp_len="
            f"{max_resp_len}, overlong_buffer.len={overlong.len})"
        )
    if overlong.len <= 0:
        raise OverlongBufferError(
            f"dapo reward manager: overlong_buffer.len must be positive when the penalty is enabled, got "
            f"{overlong.len}; set overlong_buffer.enable=false to turn the penalty off"
        )


def overlong_penalty(response_length: int, max_resp_len: int, buffer_len: int, penalty_factor: float) -> float:
    """DAPO's soft overlong penalty (<= 0) for a response of ``response_length`` tokens."""
    expected_len = max_resp_len - buffer_len
    exceed_len = response_length - expected_len
    return min(-exceed_len / buffer_len * penalty_factor, 0.0)


@register("dapo")
class DAPORewardManager(NaiveRewardManager):
    """Naive per-sample scoring, then (with ``overlong_buffer_cfg.enable``) the overlong penalty added to the score.

    Extra args: ``max_resp_len`` (the rollout's response length) and ``overlong_buffer_cfg`` (``enable``, ``len``,
    ``penalty_factor``, ``log``). ``reward_extra_info`` always has ``acc`` (the score before the penalty) and, with
    ``log``, ``overlong_reward`` and ``overlong`` per sample.
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        max_resp_len: int | None = None,
        overlong_buffer_cfg: OverlongBufferConfig | Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score=compute_score, reward_fn_key=reward_fn_key, **kwargs)
        overlong = omega_conf_to_dataclass(overlong_buffer_cfg, OverlongBufferConfig)  # None: the defaults (off)
        self.overlong_enable = overlong.enable
        self.overlong_len = overlong.len
        self.overlong_penalty_factor = overlong.penalty_factor
        self.overlong_log = overlong.log
        self.max_resp_len = max_resp_len
        check_overlong_buffer(max_resp_len, overlong)

    @classmethod
    def _extra_arg_names(cls) -> str:
        return ", max_resp_len, overlong_buffer_cfg"

    def postprocess(self, sample: Sample, score: float, extras: dict[str, Any]) -> float:
        """Record ``acc`` and add the overlong penalty when enabled."""
        extras.setdefault("acc", score)
        if not self.overlong_enable:
            return score
        penalty = overlong_penalty(
            sample.valid_response_length, int(self.max_resp_len), self.overlong_len, self.overlong_penalty_factor
        )
        if self.overlong_log:
            extras["overlong_reward"] = penalty
            extras["overlong"] = penalty < 0
        return score + penalty
