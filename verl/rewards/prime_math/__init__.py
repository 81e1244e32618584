"""PRIME / NuminaMath grader (``data_source`` ``numina_*``): the final answer of the response against the reference.

Same contract as verl's ``prime_math.compute_score``: returns ``(is_correct, format_correctness,
extracted_answer)`` and ``default_compute_score`` keeps ``float(is_correct)``. The answer is the last
``\\boxed{}`` of the response, else the text after the last "answer is" / ``Answer:``; the reference may be bare or
boxed, and may list several acceptable answers separated by ``,`` inside ``\\boxed{}`` only when the response does
too. Equivalence: the normalised string / exact-rational check of :mod:`verl.rewards.math`, then
math-verify's symbolic check. ``format_correctness`` is PRIME's format flag (step-by-step ``Step 2:`` text with a
boxed answer).
"""

from __future__ import annotations

import re
from typing import Any

from verl.rewards.math import is_equiv, last_boxed_content
from verl.rewards.math_verify import verify_equivalent

__all__ = ["compute_score", "grade_answer", "match_answer"]

_ANSWER_IS_RE = re.compile(r"(?i)(?:final answer is|answer is|answer\s*:)\s*(.+)")


def match_answer(response: str) -> tuple[bool, str]:
    """``(found, answer)``: the last boxed answer of ``response``, else the text after the last "answer is" /
    "Answer:" (trailing period and ``$`` removed); ``(False, "")`` when there is neither."""
    boxed = last_boxed_content(response)
    if boxed is not None:
        return True, boxed.strip()
    matches = _ANSWER_IS_RE.findall(response)
    if matches:
        answer = matches[-1].strip().strip("$").rstrip(".").strip()
        return bool(answer), answer
    return False, ""


def grade_answer(given: str, reference: str) -> bool:
    """Whether ``given`` equals ``reference``: string/rational normalisation first, then math-verify."""
    if not given:
        return False
    if is_equiv(given, reference):
        return True
    return bool(verify_equivalent(given, reference))


def compute_score(model_output: str, ground_truth: str, **kwargs: Any) -> tuple[bool, bool, str]:
    """``(is_correct, format_correctness, extracted_model_output)`` for one response."""
    model_output, ground_truth = str(model_output), str(ground_truth)
    is_matched, extracted = match_answer(model_output)
    format_correctness = "Step 2:" in model_output and "\\box" in model_output
    if not is_matched:
        return False, format_correctness, extracted
    reference = last_boxed_content(ground_truth) if "\\boxed" in ground_truth else ground_truth
    reference = (reference or ground_truth).strip()
    return grade_answer(extracted, reference), format_correctness, extracted
