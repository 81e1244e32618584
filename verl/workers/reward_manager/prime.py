"""The ``prime`` reward manager (PRIME, Cui et al. 2025): verification scoring in a pool of worker processes.

Each sample is scored by ``compute_score(data_source, solution_str, ground_truth, extra_info)`` called with those
four values by position (as verl's PRIME manager calls it), in a separate worker process, limited to ``timeout_s``
seconds (default 300, verl's per-task limit). A call that raises, times out, crashes its worker or returns ``None``
scores 0, as in verl; a result that is a number counts as that number, a tuple or list by its first element
(``prime_math`` returns ``(is_correct, ...)``), a dict by its ``"score"``. The verified scores are also stored as
``data.batch["acc"]`` (float32, one per row).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from verl.workers.reward_manager.abstract import AbstractRewardManager, Sample
from verl.workers.reward_manager.registry import register

__all__ = ["PositionalScore", "PrimeRewardManager", "prime_score"]

DEFAULT_TIMEOUT_S = 300.0


class PositionalScore:
    """Calls ``fn(data_source, solution_str, ground_truth, extra_info)`` by position, so a scorer written for verl's
    PRIME manager with its own parameter names still works. Picklable (it travels to the worker processes)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None) -> Any:
        return self.fn(data_source, solution_str, ground_truth, extra_info)


def prime_score(result: Any) -> Any:
    """One PRIME result as a score: ``None`` -> 0.0, a number -> float, a tuple/list -> float of its first element, a
    dict is kept (scored by its ``"score"``); an Exception is passed through so the manager's ``on_error`` decides."""
    if isinstance(result, BaseException) or isinstance(result, dict):
        return result
    if result is None:
        return 0.0
    if isinstance(result, (tuple, list)):
        if not result:
            raise ValueError("a PRIME scorer returned an empty tuple; expected (score, ...)")
        result = result[0]
    return float(result)


@register("prime")
class PrimeRewardManager(AbstractRewardManager):
    """verl's ``PrimeRewardManager``: ``(tokenizer, num_examine, compute_score=None, reward_fn_key="data_source",
    num_processes=64)``; ``num_processes`` worker processes score the batch in parallel (at most one per sample).

    This project's safety arguments are accepted too: ``timeout_s`` (default 300 s per call), ``batch_timeout_s``,
    ``on_error`` (default ``"zero"``: a failed call scores 0 as in verl, and is counted in ``reward_error``).
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        num_processes: int = 64,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        batch_timeout_s: float | None = None,
        on_error: str = "zero",
        **kwargs: Any,
    ) -> None:
        if not isinstance(num_processes, int) or isinstance(num_processes, bool) or num_processes < 1:
            raise ValueError(f"reward_model.reward_kwargs.num_processes must be an int >= 1, got {num_processes!r}")
        if compute_score is None:
            from verl.rewards import default_compute_score

            compute_score = default_compute_score
        self.num_processes = num_processes
        super().__init__(
            tokenizer,
            num_examine,
            compute_score=PositionalScore(compute_score),
            reward_fn_key=reward_fn_key,
            on_error=on_error,
            timeout_s=timeout_s,
            batch_timeout_s=batch_timeout_s,
            num_workers=num_processes,
            **kwargs,
        )

    @classmethod
    def _extra_arg_names(cls) -> str:
        return ", num_processes"

    def score_samples(self, samples: list[Sample]) -> list[Any]:
        """Score every sample in the worker pool; see :func:`prime_score` for how a result becomes a score."""
        inputs = [
            {
                "data_source": s.data_source,
                "solution_str": s.response_str,
                "ground_truth": s.ground_truth,
                "extra_info": s.extra_info,
            }
            for s in samples
        ]
        out = []
        for raw in self.call_reward_fn(inputs, self.timeout_s):
            try:
                out.append(prime_score(raw))
            except (TypeError, ValueError) as e:
                out.append(e)
        return out

    def verify(self, data: Any) -> list[float]:
        """Score the batch, store the scores as ``data.batch["acc"]`` (float32 ``[bs]``) and return them."""
        result = self(data, return_dict=True)
        return data.batch["acc"].tolist() if "acc" in data.batch.keys() else result["reward_tensor"].sum(-1).tolist()

    def __call__(self, data: Any, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        """As :meth:`AbstractRewardManager.__call__`; also sets ``data.batch["acc"]`` to the per-row scores."""
        had_rm_scores = "rm_scores" in data.batch.keys()
        out = super().__call__(data, return_dict=True)
        reward_tensor = out["reward_tensor"]
        if not had_rm_scores:
            data.batch["acc"] = reward_tensor.sum(-1).to(torch.float32)
        return out if return_dict else reward_tensor
