"""Chat-template tokenization of agent turns and the tokenization sanity check.

Turn-by-turn, a trajectory's tokens are: the prompt (the chat template over the prompt messages and the tool
schemas, with the generation prompt), then each assistant turn as generated, then each tool/user reply as the
template renders it after an assistant turn (:func:`encode_appended`). The sanity check compares those tokens with
the template's tokenization of the whole conversation; ``ignore_strippable`` accepts differences that are only
whitespace (e.g. a newline the template puts after an end-of-turn token the model generated).
"""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["encode_appended", "encode_prompt", "sanity_check", "truncate_text"]

# a stand-in conversation before the appended messages: only the text *after* it is kept
_ANCHOR = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]


def _render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict] | None,
    generation_prompt: bool,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    return tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        add_generation_prompt=generation_prompt,
        tokenize=False,
        **(template_kwargs or {}),
    )


def encode_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict] | None,
    template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Token ids of the prompt messages with the tool schemas and the assistant generation prompt;
    ``template_kwargs``: extra chat-template arguments (``data.apply_chat_template_kwargs``)."""
    text = _render(tokenizer, messages, tools, True, template_kwargs)
    return tokenizer.encode(text, add_special_tokens=False)


def encode_appended(
    tokenizer: Any, messages: list[dict[str, Any]], template_kwargs: dict[str, Any] | None = None
) -> list[int]:
    """Token ids of ``messages`` (tool results or a user reply) appended after an assistant turn, followed by the
    next assistant generation prompt: the template's text after a stand-in assistant turn."""
    before = _render(tokenizer, _ANCHOR, None, False, template_kwargs)
    after = _render(tokenizer, _ANCHOR + list(messages), None, True, template_kwargs)
    if not after.startswith(before):
        raise ValueError(
            "the chat template does not render a longer conversation as an extension of a shorter one; the agent "
            "loop cannot tokenize tool and user turns with it"
        )
    return tokenizer.encode(after[len(before) :], add_special_tokens=False)


def truncate_text(text: str, limit: int, side: str) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters on ``side`` (``left``: keep the end, ``right``: keep the start,
    ``middle``: keep both ends), marked with ``...(truncated)...``; returns ``(text, was_cut)``."""
    if len(text) <= limit:
        return text, False
    if side == "left":
        return "(truncated)..." + text[-limit:], True
    if side == "right":
        return text[:limit] + "...(truncated)", True
    head = limit // 2
    return text[:head] + "\n...(truncated)...\n" + text[len(text) - (limit - head) :], True


def sanity_check(
    tokenizer: Any,
    turn_ids: list[int],
    messages: list[dict[str, Any]],
    tools: list[dict] | None,
    mode: str,
    template_kwargs: dict[str, Any] | None = None,
) -> str | None:
    """Compare ``turn_ids`` (prompt + response tokens, turn by turn) with the template's tokenization of the whole
    conversation ``messages``. Returns None when they agree under ``mode``, else a description of the first
    difference (``disable``: always None)."""
    if mode == "disable":
        return None
    whole = tokenizer.encode(_render(tokenizer, messages, tools, False, template_kwargs), add_special_tokens=False)
    if whole == turn_ids:
        return None
    matcher = difflib.SequenceMatcher(a=turn_ids, b=whole, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        ours = tokenizer.decode(turn_ids[i1:i2], skip_special_tokens=False)
        theirs = tokenizer.decode(whole[j1:j2], skip_special_tokens=False)
        if mode == "ignore_strippable" and not ours.strip() and not theirs.strip():
            continue
        return f"turn-by-turn tokens {ours!r} at {i1} differ from the whole conversation's {theirs!r} at {j1}"
    return None
