"""Token-exact trajectories of an agent that talks to the rollout through the OpenAI API.

A trajectory is a list of *segments*, each one training sample: ``prompt_ids`` (the first request of the segment as
the chat template renders it) and a response of aligned ``response_ids`` / ``response_mask`` / ``log_probs``:
mask 1 on the ids the engine sampled, exactly as sampled (never a re-tokenization of the text the agent sends back),
mask 0 on everything else (tool results, user turns, the next generation prompt).

A request *extends* the current segment when its messages are the segment's last request's messages, then the
assistant message this endpoint returned for one of its choices, then at least one new message (compared after the
normalization of :func:`message_key`: tool-call ids and whitespace-free JSON of the arguments). The choice's sampled
ids are then committed (mask 1), the new messages appended as the chat template renders them after an assistant turn
(:func:`~verl.experimental.agent_loop.chat.encode_appended`, mask 0; an EOS id with mask 0 first when the choice
stopped without one, where the template closes the turn), and the engine continues from there. ``/v1/completions``
works alike on text: the new prompt must start with the last prompt plus the returned text; the rest is encoded
and appended (mask 0).

Anything else (the agent dropped or edited a turn, changed the tools, switched API) starts a new segment: a *split*.
When the agent is done, the last request's first choice is committed; the last segment is the trajectory's final
sample (the conversation the reward is about). The loop (``loop.py``) makes every segment a training row
(``agent.openai.train_segments=all``) or the last one only (``last``: the earlier ones are counted, ``splits``,
``discarded_tokens``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.chat import encode_appended

__all__ = ["BudgetExceeded", "Choice", "Segment", "TrajectoryRecorder", "message_key"]


class BudgetExceeded(Exception):
    """A request does not fit ``prompt_length``/``response_length``; ``reason`` names which."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def message_key(message: dict[str, Any]) -> str:
    """A chat message (as the template reads it) as a comparable string: tool-call ids left out."""
    out = dict(message)
    if out.get("tool_calls"):
        out["tool_calls"] = [{"function": c["function"]} for c in out["tool_calls"]]
    return json.dumps(out, sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class Choice:
    """One sampled answer: its ids as the engine sampled them (cut after a stop string), their log-probs, whether
    it ended on EOS, and what the agent must send back to continue it (the assistant message key or the text)."""

    ids: list[int]
    log_probs: list[float] | None
    ended: bool
    returned: str


@dataclass
class Segment:
    """One training sample (see the module docstring). ``history``: the last request's message keys (chat) or
    prompt text (completions); ``pending``: that request's choices, not yet committed."""

    kind: str
    tools: str
    prompt_ids: list[int]
    history: list[str] | str
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    has_log_probs: bool = True
    pending: list[Choice] = field(default_factory=list)
    model_turns: int = 0
    truncated: bool = False

    def append(self, ids: list[int], mask: int, log_probs: list[float] | None = None) -> None:
        """Add ids with one mask value (log-probs of model ids, or zeros)."""
        self.response_ids += ids
        self.response_mask += [mask] * len(ids)
        if log_probs is None:
            self.has_log_probs = self.has_log_probs and (mask == 0 or not ids)
            log_probs = [0.0] * len(ids)
        self.log_probs += list(log_probs)

    def commit(self, choice: Choice) -> None:
        """Make ``choice`` part of the sample (mask 1)."""
        self.append(choice.ids, 1, choice.log_probs)
        self.model_turns += 1
        self.truncated = not choice.ended
        self.pending = []

    @property
    def model_tokens(self) -> int:
        """Ids the model sampled in this segment (committed ones)."""
        return sum(self.response_mask)


class TrajectoryRecorder:
    """The segments of one trajectory (see the module docstring).

    Args:
        tokenizer: the model's tokenizer (chat template).
        eos_token_id: closes an assistant turn that stopped without EOS before appended messages.
        prompt_length: the longest segment prompt (``rollout.prompt_length``).
        response_length: the longest segment response (``rollout.response_length``).
        template_kwargs: extra chat-template arguments (``data.apply_chat_template_kwargs``).
    """

    def __init__(
        self,
        tokenizer: Any,
        eos_token_id: int,
        prompt_length: int,
        response_length: int,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})  # data.apply_chat_template_kwargs
        self.eos_token_id = int(eos_token_id)
        self.prompt_length = int(prompt_length)
        self.response_length = int(response_length)
        self.finished: list[Segment] = []
        self.current: Segment | None = None
        self.unused_choices = 0

    # ---------------------------------------------------------------------------------------------- requests
    def _extension(self, kind: str, tools: str, history: list[str] | str) -> tuple[Choice, int] | None:
        """The pending choice ``history`` continues and where the new part starts, or None (a split)."""
        seg = self.current
        if seg is None or seg.kind != kind or seg.tools != tools:
            return None
        for choice in seg.pending:
            if kind == "chat":
                prefix = [*seg.history, choice.returned]
                if len(history) > len(prefix) and history[: len(prefix)] == prefix:
                    return choice, len(prefix)
            else:
                prefix = seg.history + choice.returned
                if len(history) > len(prefix) and history.startswith(prefix):
                    return choice, len(prefix)
        return None

    def prepare(
        self,
        kind: str,
        tools: list[dict[str, Any]] | None,
        history: list[dict[str, Any]] | str,
        prompt_ids: Any,
    ) -> tuple[list[int], int]:
        """Place a request: returns ``(context ids the engine continues, token budget left)``.

        ``history``: the template-ready messages (chat) or the prompt text (completions); ``prompt_ids``: a
        callable giving the full rendering's ids (used when the request starts a segment). Raises
        :class:`BudgetExceeded` (the recorder unchanged) when the request does not fit.
        """
        tools_key = json.dumps(tools or [], sort_keys=True)
        keys: list[str] | str = [message_key(m) for m in history] if kind == "chat" else history
        found = self._extension(kind, tools_key, keys)
        if found is not None:
            seg = self.current
            choice, start = found
            if kind == "chat":
                tail = ([] if choice.ended else [self.eos_token_id]) + encode_appended(
                    self.tokenizer, history[start:], self.template_kwargs
                )
            else:
                tail = self.tokenizer.encode(history[start:], add_special_tokens=False)
            used = len(seg.response_ids) + len(choice.ids) + len(tail)
            if used >= self.response_length:
                raise BudgetExceeded(
                    f"the conversation reached rollout.response_length={self.response_length} tokens ({used} after "
                    "this request's messages)"
                )
            self.unused_choices += len(seg.pending) - 1
            seg.commit(choice)
            seg.append(tail, 0)
            seg.history = keys
            return seg.prompt_ids + seg.response_ids, self.response_length - len(seg.response_ids)
        ids = list(prompt_ids())
        if len(ids) > self.prompt_length:
            raise BudgetExceeded(
                f"the request's prompt is {len(ids)} tokens, longer than rollout.prompt_length={self.prompt_length} "
                "(raise data.max_prompt_length)"
            )
        self._close_current()
        self.current = Segment(kind, tools_key, ids, keys)
        return list(ids), self.response_length

    def record(self, choices: list[Choice]) -> None:
        """The answers of the request just placed (the agent may continue any one of them)."""
        if self.current is None:
            raise RuntimeError("record() before prepare()")
        self.current.pending = list(choices)

    # ---------------------------------------------------------------------------------------------- results
    def _close_current(self) -> None:
        seg = self.current
        if seg is None:
            return
        if seg.pending:
            self.unused_choices += len(seg.pending) - 1
            seg.commit(seg.pending[0])
        self.finished.append(seg)
        self.current = None

    def finish(self) -> list[Segment]:
        """Commit the last request's first choice; all segments, oldest first (the last is the sample)."""
        self._close_current()
        return list(self.finished)

    @property
    def splits(self) -> int:
        """Segments started after the first (history rewrites)."""
        return max(len(self.finished) + (self.current is not None) - 1, 0)
