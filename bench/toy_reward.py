"""The toy reward of the GRPO benchmarks, shared by both sides so they score identical work.

``toy_score(text)`` is the fraction of characters of a completion that are lowercase ASCII vowels: cheap,
deterministic, dense (every completion gets a different value, so GRPO groups have non-zero advantages) and
independent of the tokenizer. verl calls :func:`compute_score` (the ``custom_reward_function`` contract), TRL calls
:func:`trl_reward` (``reward_funcs`` contract: ``(prompts, completions, **kwargs) -> list[float]``).
"""

from __future__ import annotations

from typing import Any

VOWELS = frozenset("aeiou")


def toy_score(text: str) -> float:
    """Share of the characters of ``text`` that are one of ``a e i o u`` (0.0 for an empty string)."""
    if not text:
        return 0.0
    return sum(1 for ch in text if ch in VOWELS) / len(text)


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """verl's reward function contract; only the response text matters."""
    return toy_score(solution_str)


def trl_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """TRL's reward function contract for plain-text (non-chat) completions."""
    return [toy_score(c if isinstance(c, str) else str(c)) for c in completions]
