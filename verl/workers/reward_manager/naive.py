"""The ``naive`` reward manager: one reward function call per sample."""

from __future__ import annotations

from typing import Any

from verl.workers.reward_manager.abstract import AbstractRewardManager, Sample, call_with_timeout
from verl.workers.reward_manager.registry import register


@register("naive")
class NaiveRewardManager(AbstractRewardManager):
    """Calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` for each sample in turn,
    each call limited to ``timeout_s``."""

    def score_samples(self, samples: list[Sample]) -> list[Any]:
        """One result (or the exception raised) per sample."""
        results: list[Any] = []
        for s in samples:
            try:
                results.append(
                    call_with_timeout(
                        self.compute_score,
                        self.timeout_s,
                        data_source=s.data_source,
                        solution_str=s.response_str,
                        ground_truth=s.ground_truth,
                        extra_info=s.extra_info,
                    )
                )
            except Exception as e:  # handled per sample by on_error
                results.append(e)
        return results
