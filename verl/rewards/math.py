"""MATH-style rule reward: compare the last ``\\boxed{...}`` of the response with the reference answer.

MATH (Hendrycks et al., 2021, "Measuring Mathematical Problem Solving With the MATH Dataset") puts final answers in
``\\boxed{}``. A string normalisation of common LaTeX variants plus an exact rational comparison of plain numbers
and simple fractions decides first; when they differ, math-verify (symbolic equivalence, see
:mod:`verl.rewards.math_verify`) has the last word. Nothing here evaluates model text as code.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (braces balanced, so nesting works) or of
    ``\\boxed <token>``; None if there is none or its braces never close."""
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return None
    cmd = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    i = start + len(cmd)
    if i < len(text) and text[i] == " ":
        # "\boxed 5" form: the answer runs to the next "$" or whitespace.
        rest = text[i + 1 :]
        return re.split(r"[\s$]", rest, maxsplit=1)[0] or None
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def last_boxed_only_string(text: str) -> str | None:
    """The last ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\boxed <token>``) of ``text`` with its command, e.g.
    ``"\\boxed{42}"``; None if there is none (upstream verl's ``math_reward.last_boxed_only_string``)."""
    content = last_boxed_content(text)
    if content is None:
        return None
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    cmd = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    if text.startswith(cmd + " ", start):
        return f"{cmd} {content}"
    return f"{cmd}{{{content}}}"


def remove_boxed(boxed: str) -> str:
    """``"\\boxed{42}"`` -> ``"42"`` (also ``\\fbox{...}`` and ``"\\boxed 42"``): the inverse of
    :func:`last_boxed_only_string` (upstream's ``math_reward.remove_boxed``). Raises ValueError for anything else."""
    for cmd in _BOX_COMMANDS:
        if boxed.startswith(cmd + " "):
            return boxed[len(cmd) + 1 :]
        if boxed.startswith(cmd + "{") and boxed.endswith("}"):
            return boxed[len(cmd) + 1 : -1]
    raise ValueError(f"remove_boxed: {boxed[:80]!r} is not a \\boxed{{...}} expression")


def _fix_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{2}`` -> ``\\frac{1}{2}``."""
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part.startswith("{"):
            out += part
            continue
        if len(part) < 2:
            return s
        num, rest = part[0], part[1:]
        if rest.startswith("{"):
            out += "{" + num + "}" + rest
        else:
            out += "{" + num + "}{" + rest[0] + "}" + rest[1:]
    return out


def _fix_sqrt(s: str) -> str:
    """``\\sqrt2`` -> ``\\sqrt{2}``."""
    return re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)


def _strip_text_commands(s: str) -> str:
    """``\\text{cm}``, ``\\mbox{..}``, ``\\textbf{..}``: keep the inner text (units are dropped below)."""
    return re.sub(r"\\(?:text|textbf|mbox|mathrm)\{([^{}]*)\}", r"\1", s)


def normalize_answer(answer: str) -> str:
    """Canonical string form of a MATH answer for exact comparison.

    Removes spacing and sizing commands (``\\left``, ``\\!``, ``\\,``), dollar signs, degree and percent marks,
    ``\\text{}`` wrappers, a leading ``x =``, trailing periods, unifies ``\\dfrac``/``\\tfrac`` to ``\\frac``, braces
    ``\\frac12`` and ``\\sqrt2``, writes ``.5`` as ``0.5`` and ``a/b`` of two integers as ``\\frac{a}{b}``.
    """
    s = str(answer).strip()
    s = s.replace("\n", "").replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\ ", "")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\circ", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = _strip_text_commands(s)
    s = s.replace(" ", "")
    s = s.rstrip(".")
    # "x=5" / "k=\frac{1}{2}": keep the value when the left side is a short variable name.
    m = re.fullmatch(r"[a-zA-Z]\w{0,1}=(.+)", s)
    if m:
        s = m.group(1)
    s = _fix_sqrt(_fix_fracs(s))
    s = re.sub(r"(?<![\d])\.(\d)", r"0.\1", s)
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if m:
        s = f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
    # Integers written with thousands separators: "1,000" -> "1000" (only when every group has 3 digits).
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", s):
        s = s.replace(",", "")
    return s


def _as_rational(s: str) -> Fraction | None:
    """Exact value of a normalised answer that is an integer, decimal or ``\\frac{int}{int}``; else None."""
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s)
    if m:
        den = int(m.group(3))
        if den == 0:
            return None
        value = Fraction(int(m.group(2)), den)
        return -value if m.group(1) else value
    if re.fullmatch(r"-?\d+(\.\d+)?", s):
        return Fraction(s)
    return None


def is_equiv(answer: str, reference: str) -> bool:
    """True when two final answers are the same after normalisation, or equal as exact rationals."""
    a, b = normalize_answer(answer), normalize_answer(reference)
    if a == b:
        return True
    ra, rb = _as_rational(a), _as_rational(b)
    return ra is not None and rb is not None and ra == rb


def _math_verify_equiv(answer: str, reference: str) -> bool | None:
    """Symbolic check with math-verify; None when it cannot parse either side."""
    from verl.rewards.math_verify import verify_equivalent

    return verify_equivalent(answer, reference)


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 if the last boxed answer of ``solution_str`` matches ``ground_truth``, else 0.0.

    ``ground_truth`` may be the bare answer or a full reference solution containing ``\\boxed{}``.
    """
    answer = last_boxed_content(solution_str)
    if answer is None:
        return 0.0
    reference = last_boxed_content(str(ground_truth)) or str(ground_truth)
    if is_equiv(answer, reference):
        return 1.0
    return 1.0 if _math_verify_equiv(answer, reference) else 0.0
