"""The ``naive`` reward manager: one reward function call per sample."""

from __future__ import annotations

from typing import Any

from verl.workers.reward_manager.abstract import AbstractRewardManager, Sample
from verl.workers.reward_manager.registry import register


@register("naive")
class NaiveRewardManager(AbstractRewardManager):
    """Calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` once per sample; the calls
    run in parallel on the reward worker pool, each limited to ``timeout_s`` (see :class:`AbstractRewardManager`)."""

    def score_samples(self, samples: list[Sample]) -> list[Any]:
        """One result (or the exception raised) per sample."""
        inputs = [
            {
                "data_source": s.data_source,
                "solution_str": s.response_str,
                "ground_truth": s.ground_truth,
                "extra_info": s.extra_info,
            }
            for s in samples
        ]
        return self.call_reward_fn(inputs, self.timeout_s)
