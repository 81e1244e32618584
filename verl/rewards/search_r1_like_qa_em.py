"""Exact-match QA grader of Search-R1-style data (``data_source`` ``searchR1_nq``, ``searchR1_triviaqa``, ...).

As verl's ``search_r1_like_qa_em``: the answer is the text of the last ``<answer>...</answer>`` of the solution
string, and it counts only when there are at least two such tags (the solution string of these recipes starts with
the prompt, whose instructions show one ``<answer>`` example). Answers are compared after SQuAD normalisation
(lower case, punctuation and the articles a/an/the removed, whitespace collapsed) with every acceptable answer in
``ground_truth["target"]``.
"""

from __future__ import annotations

import re
import string
from typing import Any

__all__ = ["compute_score", "em_check", "extract_solution", "normalize_answer", "subem_check"]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def normalize_answer(s: str) -> str:
    """SQuAD answer normalisation: lower case, no punctuation, no articles, single spaces."""
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _targets(golden_answers: Any) -> list[str]:
    if isinstance(golden_answers, str):
        return [golden_answers]
    if isinstance(golden_answers, dict):
        golden_answers = golden_answers.get("target", [])
    return [str(a) for a in list(golden_answers)]


def em_check(prediction: str, golden_answers: Any) -> int:
    """1 when the normalised prediction equals one of the normalised golden answers, else 0."""
    pred = normalize_answer(prediction)
    return int(any(normalize_answer(g) == pred for g in _targets(golden_answers)))


def subem_check(prediction: str, golden_answers: Any) -> int:
    """1 when a normalised golden answer is a substring of the normalised prediction, else 0."""
    pred = normalize_answer(prediction)
    return int(any(normalize_answer(g) in pred for g in _targets(golden_answers)))


def extract_solution(solution_str: str) -> str | None:
    """The stripped text of the last ``<answer>`` tag, or None when there are fewer than two tags."""
    matches = list(_ANSWER_RE.finditer(solution_str))
    if len(matches) <= 1:
        return None
    return matches[-1].group(1).strip()


def compute_score(
    solution_str: str,
    ground_truth: Any,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
    **kwargs: Any,
) -> float:
    """``score`` for an exact match, ``format_score`` for a wrong extracted answer, 0 when none was extracted.

    ``ground_truth`` is ``{"target": [answers...]}`` (or a list / a single answer string). ``method`` is
    ``strict`` (exact match) or ``substring`` (a golden answer inside the prediction).
    """
    if method not in ("strict", "substring"):
        raise ValueError(f"search_r1_like_qa_em: method must be 'strict' or 'substring', got {method!r}")
    answer = extract_solution(str(solution_str))
    if answer is None:
        return 0.0
    check = em_check if method == "strict" else subem_check
    return float(score) if check(answer, ground_truth) else float(format_score)
