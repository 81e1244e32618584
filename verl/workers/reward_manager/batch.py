"""The ``batch`` reward manager: one reward function call for the whole batch (lists in, list out)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.workers.reward_manager.abstract import AbstractRewardManager, Sample
from verl.workers.reward_manager.registry import register


def per_sample_to_batch(fn: Callable[..., Any]) -> Callable[..., list[Any]]:
    """Adapt a per-sample reward function to the batch contract (a sample's exception fills its own slot)."""

    def batch_fn(
        data_sources: list[str],
        solution_strs: list[str],
        ground_truths: list[Any],
        extra_infos: list[Any],
        **kwargs: Any,
    ) -> list[Any]:
        out: list[Any] = []
        for ds, sol, gt, info in zip(data_sources, solution_strs, ground_truths, extra_infos):
            try:
                out.append(fn(data_source=ds, solution_str=sol, ground_truth=gt, extra_info=info, **kwargs))
            except Exception as e:
                out.append(e)
            except SystemExit as e:  # one sample's sys.exit must not fail the others
                out.append(RuntimeError(f"SystemExit({e.code!r}) (sys.exit called)"))
        return out

    return batch_fn


@register("batch")
class BatchRewardManager(AbstractRewardManager):
    """Calls ``compute_score(data_sources=[...], solution_strs=[...], ground_truths=[...], extra_infos=[...])``
    once and expects one result per sample (a number, a dict with ``score``, or an Exception for a failed sample).

    Suits reward functions that batch internally (a remote service, a model). Without ``compute_score`` the
    per-sample ``default_compute_score`` is looped over. The time limit of the single call is ``timeout_s`` per
    sample times the batch size.
    """

    def __init__(self, tokenizer: Any, num_examine: int, compute_score: Callable[..., Any] | None = None, **kwargs):
        if compute_score is None:
            from verl.rewards import default_compute_score

            compute_score = per_sample_to_batch(default_compute_score)
        super().__init__(tokenizer, num_examine, compute_score=compute_score, **kwargs)

    def score_samples(self, samples: list[Sample]) -> list[Any]:
        """All results from one call; if the call itself fails every sample gets that error."""
        timeout = None if self.timeout_s is None or self.timeout_s <= 0 else self.timeout_s * max(len(samples), 1)
        inputs = {
            "data_sources": [s.data_source for s in samples],
            "solution_strs": [s.response_str for s in samples],
            "ground_truths": [s.ground_truth for s in samples],
            "extra_infos": [s.extra_info for s in samples],
        }
        (results,) = self.call_reward_fn([inputs], timeout)
        if isinstance(results, BaseException):
            return [results] * len(samples)
        if results is None or isinstance(results, str | bytes | dict) or not hasattr(results, "__len__"):
            error = TypeError(f"batch reward function must return a list, got {type(results).__name__}")
            return [error] * len(samples)
        if len(results) != len(samples):
            error = ValueError(f"batch reward function returned {len(results)} results for {len(samples)} samples")
            return [error] * len(samples)
        return list(results)
