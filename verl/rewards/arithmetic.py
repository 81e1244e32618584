"""Reward of the bundled arithmetic task: 1.0 if the last integer in the response equals the answer."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# A number: comma-grouped thousands or plain digits, optional decimals. A minus sign counts only when it does not
# directly follow a digit, so "12-4" reads as 12 and 4 rather than 12 and -4.
_NUMBER_RE = re.compile(r"(?<![\d])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def extract_last_number(solution_str: str) -> Decimal | None:
    """The last number written in ``solution_str`` (commas removed), or None if it contains none."""
    matches = _NUMBER_RE.findall(solution_str)
    if not matches:
        return None
    try:
        return Decimal(matches[-1].replace(",", ""))
    except InvalidOperation:
        return None


def compute_score(solution_str: str, ground_truth: str | int) -> float:
    """1.0 if the last number in the response equals ``ground_truth`` (an integer; "42.0" counts as 42), else 0.0."""
    try:
        expected = Decimal(str(ground_truth).strip().replace(",", ""))
    except InvalidOperation as e:
        raise ValueError(f"arithmetic: ground_truth {ground_truth!r} is not a number") from e
    answer = extract_last_number(solution_str)
    return 1.0 if answer is not None and answer == expected else 0.0
