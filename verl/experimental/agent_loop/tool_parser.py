"""Tool calls in the model's own output format, parsed from a turn's token ids (``rollout.multi_turn.format``).

* ``hermes`` (Qwen2.5/Qwen3, Hermes): ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>``, any number per
  turn; the text outside the tags is the turn's content.
* ``gpt-oss`` (OpenAI harmony): ``<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>``
  (the recipient may also stand before the channel); the analysis channel is dropped from the content.
* ``kimi`` (Kimi K2): ``<|tool_calls_section_begin|><|tool_call_begin|>ID<|tool_call_argument_begin|>{...}
  <|tool_call_end|>...<|tool_calls_section_end|>``; the model names each call by an id (``functions.f:0``), which
  the call keeps as :attr:`FunctionCall.tool_call_id` so the tool message answers that id.

A parser reads a turn two ways: :meth:`ToolParser.parse_ids` (here: a :class:`ParsedTurn` with the malformed calls
as errors) and upstream verl's interface, ``await parser.extract_tool_calls(response_ids, tools)`` returning
``(content, calls)`` (``verl/experimental/agent_loop/tool_parser.py`` upstream). A parser written for upstream
(``@ToolParser.register("name")`` with its own async ``extract_tool_calls``) works in the loop as it is.

Parsing never raises on model output: a call that is not valid JSON, lacks a name, or has non-object arguments is
reported in :attr:`ParsedTurn.errors` (a message for the model) and counted by the loop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from verl.utils.registry import Registry

__all__ = ["FunctionCall", "GptOssToolParser", "HermesToolParser", "KimiToolParser", "ParsedTurn", "ToolParser"]


@dataclass(frozen=True)
class FunctionCall:
    """One parsed call: the function ``name``, its ``arguments`` as a JSON object string, and the id the model gave
    the call (``tool_call_id``; None for formats whose calls carry none). The loop answers a call with an id by a
    tool message with that ``tool_call_id``, which chat templates such as Kimi K2's render."""

    name: str
    arguments: str
    tool_call_id: str | None = None

    def parameters(self) -> dict[str, Any]:
        """The arguments as a dict."""
        return json.loads(self.arguments)


@dataclass
class ParsedTurn:
    """A turn's text without its tool calls, the well-formed calls, and one error message per malformed call."""

    content: str
    calls: list[FunctionCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _call_from_payload(name: Any, arguments: Any, raw: str, tool_call_id: str | None = None) -> FunctionCall | str:
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
    return FunctionCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False), tool_call_id=tool_call_id)


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

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end a turn besides EOS (upstream's hook for formats whose models write on past a call,
        e.g. Gemma 4 after its closing call marker): the loop asks the engine to stop there and parses the turn with
        the stop token kept. None by default (the turn ends at the model's EOS)."""
        return []

    def decode(self, response_ids: list[int]) -> str:
        """The turn's text with special tokens kept (tool-call markers may be special tokens)."""
        return self.tokenizer.decode(response_ids, skip_special_tokens=False)

    def parse_ids(self, response_ids: list[int], tools: list[Any] | None = None) -> ParsedTurn:
        """Parse one generated turn (its token ids, EOS included or not). ``tools``: the episode's tool schemas
        (``OpenAIFunctionToolSchema`` or their dicts), for formats that name calls by id rather than by function."""
        return self.parse_text(self.decode(response_ids), tools)

    def parse_text(self, text: str, tools: list[Any] | None = None) -> ParsedTurn:
        """Parse a turn's decoded text (what subclasses implement)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither parse_text nor extract_tool_calls")

    async def extract_tool_calls(
        self, responses_ids: list[int], tools: list[Any] | None = None
    ) -> tuple[str, list[FunctionCall]]:
        """Upstream verl's parser interface: ``(content, calls)`` of one turn; malformed calls are left out (the
        loop reads them from :meth:`parse_turn`). Parsers written for upstream override this method."""
        turn = self.parse_ids(responses_ids, tools)
        return turn.content, turn.calls

    async def parse_turn(self, response_ids: list[int], tools: list[Any] | None = None) -> ParsedTurn:
        """What the loop calls: :meth:`parse_ids`, or, for a parser that overrides upstream's
        :meth:`extract_tool_calls`, that method's ``(content, calls)`` (it reports no malformed calls)."""
        if type(self).extract_tool_calls is ToolParser.extract_tool_calls:
            return self.parse_ids(response_ids, tools)
        content, calls = await self.extract_tool_calls(response_ids, tools)
        return ParsedTurn(content=content, calls=list(calls))


@ToolParser.register("hermes")
class HermesToolParser(ToolParser):
    """``<tool_call>{json}</tool_call>``; an opening tag without its closing tag is a malformed call."""

    _call = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    call_start = "<tool_call>"

    def parse_text(self, text: str, tools: list[Any] | None = None) -> ParsedTurn:
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

    def parse_text(self, text: str, tools: list[Any] | None = None) -> ParsedTurn:
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


def _tool_names(tools: list[Any] | None) -> list[str]:
    """The function names of tool schemas given as ``OpenAIFunctionToolSchema`` objects or their dicts."""
    names = []
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else getattr(tool, "function", None)
        name = function.get("name") if isinstance(function, dict) else getattr(function, "name", None)
        if isinstance(name, str):
            names.append(name)
    return names


@ToolParser.register("kimi")
class KimiToolParser(ToolParser):
    """Kimi K2's call section: each call is ``<|tool_call_begin|>ID<|tool_call_argument_begin|>{json}
    <|tool_call_end|>`` inside ``<|tool_calls_section_begin|>...<|tool_calls_section_end|>``; the content is the
    text before the section.

    The id is kept as the call's ``tool_call_id``. The function name comes from the id: Kimi K2 writes
    ``functions.NAME:INDEX``; an id of another shape names the one tool (of ``tools``) whose name it contains,
    else it is taken as the name itself (and an unknown name becomes the loop's unknown-tool message)."""

    section_start = "<|tool_calls_section_begin|>"
    call_start = section_start
    _section = re.compile(r"<\|tool_calls_section_begin\|>(.*?)(?:<\|tool_calls_section_end\|>|$)", re.DOTALL)
    _call = re.compile(
        r"<\|tool_call_begin\|>\s*(.*?)\s*<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.DOTALL
    )
    _kimi_id = re.compile(r"^(?:functions\.)?(.+?)(?::\d+)?$")

    @property
    def stop_token_ids(self) -> list[int]:
        """``<|im_end|>``, Kimi K2's end of turn, when the tokenizer has it as one token."""
        convert = getattr(self.tokenizer, "convert_tokens_to_ids", None)
        token_id = convert("<|im_end|>") if convert is not None else None
        if not isinstance(token_id, int) or token_id < 0:
            return []
        back = getattr(self.tokenizer, "convert_ids_to_tokens", None)
        if back is not None and back(token_id) != "<|im_end|>":  # an unknown token mapped to the unk id
            return []
        return [token_id]

    @classmethod
    def name_of(cls, tool_call_id: str, tools: list[Any] | None = None) -> str:
        """The function a call id names (see the class docstring)."""
        names = _tool_names(tools)
        if tool_call_id in names:
            return tool_call_id
        match = cls._kimi_id.match(tool_call_id)
        stripped = match.group(1) if match else tool_call_id
        if not names or stripped in names:
            return stripped
        contained = [n for n in names if n.lower() in tool_call_id.lower()]
        if len(contained) == 1:
            return contained[0]
        longest = max(contained, key=len, default=None)  # "search" and "search_web" both in "search_web-1"
        if longest is not None and all(n in longest for n in contained):
            return longest
        return stripped

    def parse_text(self, text: str, tools: list[Any] | None = None) -> ParsedTurn:
        start = text.find(self.section_start)
        if start < 0:
            return ParsedTurn(content=text)
        turn = ParsedTurn(content=text[:start])
        for section in self._section.findall(text[start:]):
            for raw_id, body in self._call.findall(section):
                if not raw_id:
                    turn.errors.append(f"tool call without an id: {body.strip()[:200]!r}")
                    continue
                call = _call_from_payload(self.name_of(raw_id, tools), body, body.strip(), tool_call_id=raw_id)
                (turn.calls if isinstance(call, FunctionCall) else turn.errors).append(call)
            unparsed = self._call.sub("", section)
            if "<|tool_call_begin|>" in unparsed:
                turn.errors.append("a <|tool_call_begin|> call does not end with <|tool_call_end|>")
        if "<|tool_calls_section_end|>" not in text[start:]:
            turn.errors.append("the <|tool_calls_section_begin|> section is not closed by <|tool_calls_section_end|>")
        return turn
