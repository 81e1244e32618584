"""DAPO / AIME grader (``data_source`` ``math_dapo`` and ``aime*``): the Minerva-style ``Answer:`` check.

Facts from verl's ``math_dapo`` scorer (itself after Lewkowycz et al., 2022, "Solving Quantitative Reasoning Problems
with Language Models" - Minerva): only the last 300 characters of the response are read; the answer is the text
after the last ``Answer:`` (case-insensitive) on its line, normalised (units and ``\\text{}`` removed, ``\\frac12``
braced, ``$`` dropped, thousands separators removed from integers) and compared as a string with the normalised
reference. With ``strict_box_verify`` the last ``\\boxed{}`` of the last 100 characters must equal the reference
exactly. Score: ``1.0`` correct, ``-1.0`` otherwise (DAPO's reward), returned with ``acc`` and ``pred``.
"""

from __future__ import annotations

import re
from typing import Any

from verl.rewards.math import last_boxed_content

__all__ = [
    "compute_score",
    "is_correct_minerva",
    "is_correct_strict_box",
    "last_boxed_only_string",
    "normalize_final_answer",
    "remove_boxed",
    "verify",
]

_TAIL_CHARS = 300
_STRICT_TAIL_CHARS = 100
ANSWER_PATTERN = r"(?i)Answer\s*:\s*([^\n]+)"

# Textual substitutions applied before the regex clean-up (Minerva's normalisation list).
_SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    (r"\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
# Unit words and filler that carry no value; removed wherever they appear.
_REMOVED_EXPRESSIONS: tuple[str, ...] = (
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
    "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
    "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
    "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;",
    r",\!", "{,}", '"', "\\dots",
)  # fmt: skip


def last_boxed_only_string(string: str) -> str | None:
    """The last ``\\boxed{...}`` (with its command and braces) of ``string``, or None."""
    idx = string.rfind("\\boxed")
    if idx < 0:
        return None
    content = last_boxed_content(string[idx:])
    if content is None:
        return None
    return "\\boxed{" + content + "}"


def remove_boxed(s: str) -> str:
    """``\\boxed{x}`` -> ``x`` (ValueError if ``s`` is not of that form)."""
    prefix = "\\boxed{"
    if not (s.startswith(prefix) and s.endswith("}")):
        raise ValueError(f"not a \\boxed{{...}} expression: {s[:80]!r}")
    return s[len(prefix) : -1]


def normalize_final_answer(final_answer: str) -> str:
    """Canonical string of a final answer (see the module docstring); the right side of the last ``=`` is kept."""
    final_answer = final_answer.split("=")[-1]
    for before, after in _SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in _REMOVED_EXPRESSIONS:
        final_answer = final_answer.replace(expr, "")
    # Keep the math between the first pair of dollars; unwrap \text{}, \textbf{}, \overline{}, \boxed{}.
    final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    # \fracab -> \frac{a}{b}, \frac{a}b -> \frac{a}{b}, \sqrta -> \sqrt{a}
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if final_answer.replace(",", "").isdigit():
        final_answer = final_answer.replace(",", "")
    return final_answer.strip()


def is_correct_minerva(
    solution_str: str, gt: str, gt_need_extract: bool = False, answer_pattern: str = ANSWER_PATTERN
) -> tuple[bool, str]:
    """``(correct, pred)``: the last ``Answer: ...`` of ``solution_str`` against ``gt`` after normalisation.

    ``gt_need_extract`` takes the reference from its last ``\\boxed{}`` first. ``pred`` is ``"[INVALID]"`` when the
    response has no ``Answer:`` line.
    """
    matches = re.findall(answer_pattern, solution_str)
    extracted = matches[-1] if matches else "[INVALID]"
    pred = normalize_final_answer(extracted)
    if gt_need_extract:
        boxed = last_boxed_only_string(gt)
        gt = normalize_final_answer(remove_boxed(boxed)) if boxed else normalize_final_answer(gt)
    else:
        gt = normalize_final_answer(gt)
    return pred == gt, pred


def is_correct_strict_box(pred: str, gt: str, pause_tokens_index: list[int] | None = None) -> tuple[int, str | None]:
    """``(1 | -1, boxed answer)``: the last ``\\boxed{}`` in the tail of ``pred`` must equal ``gt`` exactly.

    The tail is the last 100 characters, or what follows the last pause token when ``pause_tokens_index`` (four
    indices) is given.
    """
    if pause_tokens_index is not None:
        if len(pause_tokens_index) != 4:
            raise ValueError(f"pause_tokens_index must hold 4 indices, got {len(pause_tokens_index)}")
        pred = pred[pause_tokens_index[-1] - _STRICT_TAIL_CHARS :]
    else:
        pred = pred[-_STRICT_TAIL_CHARS:]
    boxed = last_boxed_only_string(pred)
    extracted = remove_boxed(boxed) if boxed is not None else None
    return (1 if extracted == gt else -1), extracted


def verify(
    solution_str: str, answer: str, strict_box_verify: bool = False, pause_tokens_index: list[int] | None = None
) -> tuple[bool, str | None]:
    """``(correct, pred)`` by the strict box check or the Minerva check (default)."""
    if strict_box_verify:
        correct, pred = is_correct_strict_box(solution_str, answer, pause_tokens_index)
        return correct == 1, pred
    return is_correct_minerva(solution_str, answer)


def compute_score(
    solution_str: str,
    ground_truth: str,
    strict_box_verify: bool = False,
    pause_tokens_index: list[int] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """``{"score": 1.0 | -1.0, "acc": bool, "pred": str}`` for one response (only its last 300 characters count)."""
    solution_str = str(solution_str)[-_TAIL_CHARS:]
    correct, pred = verify(solution_str, str(ground_truth), strict_box_verify, pause_tokens_index)
    return {"score": 1.0 if correct else -1.0, "acc": bool(correct), "pred": pred}
