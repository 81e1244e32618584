"""Reward of the tool-learning recipe: 1.0 when the model's final "The answer is N" states the product, else 0.

The response text is the whole conversation after the prompt (tool turns included), so only the answer sentence
counts, not the number in the calculator's reply. Used as ``custom_reward_function.path`` (verl's per-sample
contract).
"""

from __future__ import annotations

import re
from typing import Any

ANSWER = re.compile(r"The answer is\s*(-?[\d,]+)")


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """1.0 when the last "The answer is N" in ``solution_str`` has N == ``ground_truth`` (commas ignored)."""
    found = ANSWER.findall(solution_str)
    return float(bool(found) and found[-1].replace(",", "") == str(ground_truth).strip())
