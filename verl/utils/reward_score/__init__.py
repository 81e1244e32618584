"""Rule-based reward functions and ``default_compute_score``, which routes a sample to one by ``data_source``.

The reward function contract (verl's): ``fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs)``
returns a float, or a dict with a ``"score"`` key plus extra values to log.
"""

from __future__ import annotations

from typing import Any

GSM8K_SOURCES = ("openai/gsm8k",)
MATH_SOURCES = (
    "lighteval/MATH",
    "DigitalLearningGmbH/MATH-lighteval",
    "HuggingFaceH4/MATH-500",
    "hendrycks/competition_math",
    "EleutherAI/hendrycks_math",
    "lighteval/MATH-Hard",
)
ARITHMETIC_SOURCES = ("arithmetic",)
KNOWN_DATA_SOURCES = GSM8K_SOURCES + MATH_SOURCES + ARITHMETIC_SOURCES


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """Score one response with the rule scorer of its ``data_source``.

    - ``openai/gsm8k``: ``verl.utils.reward_score.gsm8k`` (kwargs ``method`` = strict | flexible,
      ``format_score``, ``score``);
    - MATH sources (``lighteval/MATH``, ``DigitalLearningGmbH/MATH-lighteval``, ``HuggingFaceH4/MATH-500``, ...):
      last ``\\boxed{}`` compared with the reference (``verl.utils.reward_score.math``);
    - ``arithmetic``: 1.0 when the last number equals the answer.

    Unknown sources raise NotImplementedError naming the source and the known ones. Extra kwargs that verl passes
    to reward functions (e.g. ``sandbox_fusion_url``) are accepted and ignored by these rule scorers.
    """
    if data_source in GSM8K_SOURCES:
        from verl.utils.reward_score import gsm8k

        gsm8k_kwargs = {k: kwargs[k] for k in ("method", "format_score", "score") if k in kwargs}
        return gsm8k.compute_score(solution_str, ground_truth, **gsm8k_kwargs)
    if data_source in MATH_SOURCES:
        from verl.utils.reward_score import math as math_score

        return math_score.compute_score(solution_str, ground_truth)
    if data_source in ARITHMETIC_SOURCES:
        from verl.utils.reward_score import arithmetic

        return arithmetic.compute_score(solution_str, ground_truth)
    raise NotImplementedError(
        f"no reward function for data_source={data_source!r}; known sources: {list(KNOWN_DATA_SOURCES)}. "
        "Set custom_reward_function.path to score other data."
    )


__all__ = ["default_compute_score", "KNOWN_DATA_SOURCES", "GSM8K_SOURCES", "MATH_SOURCES", "ARITHMETIC_SOURCES"]
