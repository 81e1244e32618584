"""Tool calls in the model's own output format, parsed from a turn's token ids (``rollout.multi_turn.format``).

* ``hermes`` (Qwen2.5/Qwen3, Hermes): ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>``, any number per
  turn; the text outside the tags is the turn's content.
* ``gpt-oss`` (OpenAI harmony): ``<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>``
  (the recipient may also stand before the channel); the analysis channel is dropped from the content.

Parsing never raises on model output: a call that is not valid JSON, lacks a name, or has non-object arguments is
reported in :attr:`ParsedTurn.errors` (a message for the model) and counted by the loop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from verl.utils.registry import Registry

__all__ = ["FunctionCall", "GptOssToolParser", "HermesToolParser", "ParsedTurn", "ToolParser"]


@dataclass(frozen=True)
class FunctionCall:
    """One parsed call: the function ``name`` and its ``arguments`` as a JSON object string."""

    name: str
    arguments: str

    def parameters(self) -> dict[str, Any]:
        """The arguments as a dict."""
        return json.loads(self.arguments)


@dataclass
class ParsedTurn:
    """A turn's text without its tool calls, the well-formed calls, and one error message per malformed call."""

    content: str
    calls: list[FunctionCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _call_from_payload(name: Any, arguments: Any, raw: str) -> FunctionCall | str:
    """A :class:`FunctionCall`, or the error message describing why ``raw`` is not one."""
    if not isinstance(name, str) or not name:
        return f"tool call {raw[:200]!r} has no function name"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return f"arguments of tool call {name!r} are not valid JSON: {e.msg}"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f"arguments of tool call {name!r} must be a JSON object, got {type(arguments).__name__}"
    return FunctionCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False))


class ToolParser:
    """Base class and registry of the output formats; subclasses implement :meth:`parse_text`."""

    formats: ClassVar[Registry[type[ToolParser]]] = Registry(
        "tool-call format",
        replace=True,  # a later parser under a taken name wins, as before
        unknown_error=lambda name, known: ValueError(
            f"rollout.multi_turn.format={name!r} is unknown; known formats: {known}"
        ),
    )
    """The parsers by ``rollout.multi_turn.format``."""
    call_start: ClassVar[str | None] = None
    """The text that opens the first tool call of a turn (what a streaming server holds back from); None when the
    format has no such marker, so a stream cannot tell content from a call before the turn ends."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def register(cls, name: str):
        """Class decorator adding a parser under ``name`` (the value of ``rollout.multi_turn.format``)."""

        return cls.formats.decorator(name)

    @classmethod
    def available(cls) -> list[str]:
        """The registered format names."""
        return cls.formats.names()

    @classmethod
    def get_tool_parser(cls, name: str, tokenizer: Any) -> ToolParser:
        """The parser of format ``name``; unknown names raise ``ValueError`` listing the known ones."""
        return cls.formats.get(name)(tokenizer)

    def decode(self, response_ids: list[int]) -> str:
        """The turn's text with special tokens kept (tool-call markers may be special tokens)."""
        return self.tokenizer.decode(response_ids, skip_special_tokens=False)

    def extract_tool_calls(self, response_ids: list[int]) -> ParsedTurn:
        """Parse one generated turn (its token ids, EOS included or not)."""
        return self.parse_text(self.decode(response_ids))

    def parse_text(self, text: str) -> ParsedTurn:
        raise NotImplementedError


@ToolParser.register("hermes")
class HermesToolParser(ToolParser):
    """``<tool_call>{json}</tool_call>``; an opening tag without its closing tag is a malformed call."""

    _call = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    call_start = "<tool_call>"

    def parse_text(self, text: str) -> ParsedTurn:
        turn = ParsedTurn(content=self._call.sub("", text))
        for raw in self._call.findall(text):
            try:
                payload = json.loads(raw)
            except json.JSONDecodeError as e:
                turn.errors.append(f"tool call is not valid JSON ({e.msg}): {raw.strip()[:200]!r}")
                continue
            if not isinstance(payload, dict):
                turn.errors.append(f"tool call must be a JSON object with name and arguments: {raw.strip()[:200]!r}")
                continue
            call = _call_from_payload(payload.get("name"), payload.get("arguments", {}), raw.strip())
            (turn.calls if isinstance(call, FunctionCall) else turn.errors).append(call)
        if "<tool_call>" in turn.content:
            turn.errors.append("a <tool_call> tag is not closed by </tool_call>")
        return turn


@ToolParser.register("gpt-oss")
class GptOssToolParser(ToolParser):
    """gpt-oss harmony messages addressed ``to=functions.<name>`` with a JSON body ending in ``<|call|>``."""

    _analysis = re.compile(r"(?:<\|start\|>assistant)?<\|channel\|>analysis<\|message\|>.*?<\|end\|>", re.DOTALL)
    _call = re.compile(
        r"(?:<\|start\|>assistant)?(?:<\|channel\|>[^<]*?)?\s*to=functions\.([^\s<]+)\s*(?:<\|channel\|>[^<]*)?"
        r"(?:<\|constrain\|>\s*json)?\s*<\|message\|>(.*?)<\|call\|>",
        re.DOTALL,
    )

    def parse_text(self, text: str) -> ParsedTurn:
        text = self._analysis.sub("", text)
        turn = ParsedTurn(content=self._call.sub("", text))
        for name, body in self._call.findall(text):
            try:
                arguments = json.loads(body)
            except json.JSONDecodeError as e:
                turn.errors.append(f"arguments of tool call {name!r} are not valid JSON ({e.msg}): {body[:200]!r}")
                continue
            call = _call_from_payload(name, arguments, body)
            (turn.calls if isinstance(call, FunctionCall) else turn.errors).append(call)
        if "to=functions." in turn.content:
            turn.errors.append("a tool call addressed to=functions.<name> does not end with <|call|>")
        final = re.search(r"<\|channel\|>final<\|message\|>(.*?)(?:<\|return\|>|<\|end\|>|$)", turn.content, re.DOTALL)
        if final:
            turn.content = final.group(1)
        return turn
