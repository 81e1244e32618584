"""Scorer of the synthetic colour task (``data_source`` ``synthetic_colour``, see ``synthetic_vision``).

1.0 when the response names the image's colour as its first word (case-insensitive). A tiny random byte-level model
cannot spell a word by chance, so the scorer also accepts a one-character answer alphabet: red is any ASCII first
character, blue any other first character (a lone high byte decodes to U+FFFD). A random policy then scores about
0.5, and only a policy that reads the image (the prompt text is the same for both colours) scores more.
"""

from __future__ import annotations

__all__ = ["compute_score"]


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 for the right colour (its name as the first word, or for red / blue the first character's half of the
    alphabet), else 0.0."""
    colour = str(ground_truth).strip().lower()
    text = solution_str.strip()
    if not text:
        return 0.0
    first_word = text.split()[0].strip(".,!").lower()
    if first_word == colour:
        return 1.0
    if colour not in ("red", "blue") or first_word in ("red", "blue"):
        return 0.0  # the one-character alphabet covers the two colours of the task only
    is_ascii = ord(text[0]) < 128
    return 1.0 if is_ascii == (colour == "red") else 0.0
