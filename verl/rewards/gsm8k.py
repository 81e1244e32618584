"""GSM8K rule reward: the answer is the number after ``####`` (strict) or the last number (flexible).

Format of GSM8K reference solutions (Cobbe et al., 2021, "Training Verifiers to Solve Math Word Problems"):
reasoning, then ``#### <number>``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# Only the tail of a long response is searched: the final answer comes last, and this bounds regex work.
_TAIL_CHARS = 300
_STRICT_RE = re.compile(r"#### *(-?[0-9.,$]+)")
_NUMBER_RE = re.compile(r"-?[$0-9.,]*[0-9][0-9.,]*")


def _clean_number(text: str) -> str:
    return text.replace(",", "").replace("$", "").rstrip(".")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """Extract the final answer string from a response.

    ``strict``: the last ``#### <number>``; ``flexible``: the last number anywhere. Commas, ``$`` and a trailing
    period are removed. Returns None when no answer is found.
    """
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k: method must be 'strict' or 'flexible', got {method!r}")
    tail = solution_str[-_TAIL_CHARS:]
    pattern = _STRICT_RE if method == "strict" else _NUMBER_RE
    matches = pattern.findall(tail)
    for candidate in reversed(matches):
        cleaned = _clean_number(candidate)
        if cleaned not in ("", "-", "."):
            return cleaned
    return None


def _same_number(a: str, b: str) -> bool:
    try:
        return Decimal(a) == Decimal(b)
    except InvalidOperation:
        return a == b


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """``score`` if the extracted answer equals ``ground_truth`` (numerically: "42.0" == "42"), ``format_score``
    if an answer was found but is wrong, 0.0 if none was found."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return score if _same_number(answer, _clean_number(str(ground_truth).strip())) else format_score
