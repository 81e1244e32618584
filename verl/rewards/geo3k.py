"""Geometry3K grader (``data_source`` ``hiyouga/geometry3k``): answer accuracy plus a small format bonus.

As verl's ``geo3k`` scorer: ``score = (1 - format_score) * acc + format_score * format``, where ``format`` is 1 when
the response is ``<think>...</think>`` followed by text containing a ``\\boxed{}`` answer, and ``acc`` is 1 when the
last boxed answer equals the reference (string/rational normalisation, then math-verify).
"""

from __future__ import annotations

import re
from typing import Any

from verl.rewards.math import last_boxed_content
from verl.rewards.prime_math import grade_answer

__all__ = ["acc_reward", "compute_score", "format_reward"]

_FORMAT_RE = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def format_reward(predict_str: str) -> float:
    """1.0 when the whole response is ``<think>...</think> ... \\boxed{...} ...``, else 0.0."""
    return 1.0 if _FORMAT_RE.fullmatch(predict_str) else 0.0


def acc_reward(predict_str: str, ground_truth: str, use_boxed: bool = True) -> float:
    """1.0 when the answer (last boxed content, or the whole response with ``use_boxed=False``) matches."""
    answer = last_boxed_content(predict_str) if use_boxed else predict_str.strip()
    return 1.0 if answer is not None and grade_answer(answer.strip(), str(ground_truth).strip()) else 0.0


def compute_score(
    predict_str: str, ground_truth: str, use_boxed: bool = True, format_score: float = 0.1, **kwargs: Any
) -> float:
    """``(1 - format_score) * acc_reward + format_score * format_reward``."""
    return (1.0 - format_score) * acc_reward(predict_str, ground_truth, use_boxed) + format_score * format_reward(
        predict_str
    )
