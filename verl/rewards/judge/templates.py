"""Judge prompt templates and score parsers: pointwise (a 0-10 rating) and pairwise (A or B).

The ready templates follow the MT-Bench judging format (L. Zheng et al., "Judging LLM-as-a-Judge with MT-Bench and
Chatbot Arena", NeurIPS 2023): the verdict is written in double brackets, ``Rating: [[7]]`` or ``[[A]]``, which
keeps the parse unambiguous when the judge also explains itself. A user template is any ``str.format`` string
using the placeholders of its mode: ``{prompt}``, ``{response}`` (pointwise) or ``{prompt}``, ``{response_a}``,
``{response_b}`` (pairwise); ``{ground_truth}`` is available in both.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable

POINTWISE_TEMPLATE = (
    "Please act as an impartial judge and evaluate the quality of the response provided by an AI assistant to the "
    "user question below. Consider helpfulness, correctness, relevance and level of detail. After a short "
    'explanation, rate the response on a scale of 0 to 10 by strictly following this format: "Rating: [[5]]".\n\n'
    "[Question]\n{prompt}\n\n[The Start of Assistant's Answer]\n{response}\n[The End of Assistant's Answer]"
)

PAIRWISE_TEMPLATE = (
    "Please act as an impartial judge and evaluate the responses provided by two AI assistants to the user question "
    "below. Choose the assistant that follows the instructions and answers the question better. Do not let the "
    "order or the length of the responses influence you. After a short explanation, output your final verdict by "
    'strictly following this format: "[[A]]" if assistant A is better, "[[B]]" if assistant B is better.\n\n'
    "[User Question]\n{prompt}\n\n[The Start of Assistant A's Answer]\n{response_a}\n[The End of Assistant A's "
    "Answer]\n\n[The Start of Assistant B's Answer]\n{response_b}\n[The End of Assistant B's Answer]"
)

TEMPLATES: dict[str, str] = {"pointwise": POINTWISE_TEMPLATE, "pairwise": PAIRWISE_TEMPLATE}
PLACEHOLDERS: dict[str, frozenset[str]] = {
    "pointwise": frozenset({"prompt", "response", "ground_truth"}),
    "pairwise": frozenset({"prompt", "response_a", "response_b", "ground_truth"}),
}
REQUIRED: dict[str, frozenset[str]] = {
    "pointwise": frozenset({"response"}),
    "pairwise": frozenset({"response_a", "response_b"}),
}

# the first of "[[7]]" / "[[7.5]]", "Rating: 7" / "Score: 7", "7/10"
POINTWISE_PATTERN = (
    r"\[\[\s*(\d+(?:\.\d+)?)\s*\]\]|(?:rating|score)\s*[:=]\s*(\d+(?:\.\d+)?)|(\d+(?:\.\d+)?)\s*/\s*10\b"
)
PAIRWISE_PATTERN = r"\[\[\s*([AB])\s*\]\]"


class JudgeParseError(ValueError):
    """The judge's answer holds no verdict the parser accepts."""


def check_template(template: str, mode: str, key: str = "reward_model.judge.template") -> str:
    """Return ``template`` after checking that it uses only the placeholders of ``mode`` and all required ones;
    errors name ``key`` and the offending placeholder."""
    if mode not in TEMPLATES:
        raise ValueError(f"reward_model.judge.mode must be one of {sorted(TEMPLATES)}, got {mode!r}")
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as e:
        raise ValueError(f"{key}: not a valid format string ({e}); write literal braces as {{{{ and }}}}") from e
    unknown = fields - PLACEHOLDERS[mode]
    if unknown:
        raise ValueError(
            f"{key}: unknown placeholder(s) {sorted(unknown)} for mode={mode}; use {sorted(PLACEHOLDERS[mode])}"
        )
    missing = REQUIRED[mode] - fields
    if missing:
        raise ValueError(f"{key}: a {mode} template must contain {sorted(missing)}")
    return template


def pointwise_parser(pattern: str | None = None, max_score: float = 10.0) -> Callable[[str], float]:
    """A parser of pointwise verdicts: the first match of ``pattern`` (its first non-empty group is the number;
    default :data:`POINTWISE_PATTERN`, case-insensitive) divided by ``max_score``, so the reward is in [0, 1].
    A missing number or one outside ``[0, max_score]`` raises :class:`JudgeParseError`."""
    if max_score <= 0:
        raise ValueError(f"reward_model.judge.max_score must be > 0, got {max_score}")
    regex = re.compile(pattern or POINTWISE_PATTERN, re.IGNORECASE)
    if regex.groups < 1:
        raise ValueError(f"reward_model.judge.score_pattern {pattern!r} needs a capturing group around the score")

    def parse(text: str) -> float:
        for match in regex.finditer(text):
            value = next((g for g in match.groups() if g), None)
            if value is None:
                continue
            score = float(value)
            if not 0.0 <= score <= max_score:
                raise JudgeParseError(f"score {score} outside [0, {max_score}] in judge answer {text!r:.200}")
            return score / max_score
        raise JudgeParseError(f"no score in judge answer {text!r:.200}")

    return parse


def pairwise_parser(pattern: str | None = None) -> Callable[[str], float]:
    """A parser of pairwise verdicts: 1.0 when the first match of ``pattern`` (default :data:`PAIRWISE_PATTERN`)
    names A, 0.0 when it names B; anything else raises :class:`JudgeParseError`."""
    regex = re.compile(pattern or PAIRWISE_PATTERN)
    if regex.groups < 1:
        raise ValueError(f"reward_model.judge.score_pattern {pattern!r} needs a capturing group around A or B")

    def parse(text: str) -> float:
        match = regex.search(text)
        verdict = match.group(1).strip().upper() if match else None
        if verdict == "A":
            return 1.0
        if verdict == "B":
            return 0.0
        raise JudgeParseError(f"no [[A]] / [[B]] verdict in judge answer {text!r:.200}")

    return parse
