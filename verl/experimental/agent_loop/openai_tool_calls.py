"""Tool calling in ``POST /v1/chat/completions`` (OpenAI's function tools), so a trained agent can be served.

A request with ``tools`` (and ``tool_choice`` ``"auto"``, the default, or ``"none"``)::

    {"messages": [{"role": "user", "content": "What is 12*34?"}],
     "tools": [{"type": "function", "function": {"name": "calculator", "parameters": {...}}}]}

is rendered through the model's chat template with the tool schemas (as the agent loop renders its prompts,
:func:`verl.experimental.agent_loop.chat.encode_prompt`), and the answer is parsed with the agent loop's tool
parser (:mod:`verl.experimental.agent_loop.tool_parser`, the server's ``--tool-call-parser``, default ``hermes``).
When it holds calls, the choice's message carries them (each under the id the model gave it where its format has
ids, as Kimi K2's, else a new ``call_...`` id) and ``finish_reason`` is ``"tool_calls"``::

    {"role": "assistant", "content": null,
     "tool_calls": [{"id": "call_...", "type": "function",
                     "function": {"name": "calculator", "arguments": "{\\"expression\\": \\"12*34\\"}"}}]}

The conversation can continue with the assistant message holding ``tool_calls`` and ``role: "tool"`` messages
(``tool_call_id``, ``content``), rendered by the template as the model saw them in training. ``tool_choice:
"none"`` renders no tools and parses nothing; ``"required"`` and a named function cannot be enforced by this server
and are refused. Malformed calls are not reported as calls: the answer's text is returned as content.

With ``stream: true`` (:class:`ToolCallStream`) the content before the first call's opening marker
(``<tool_call>`` for ``hermes``) streams as ``delta.content`` pieces; from the marker on, the text is held back, and
when the answer ends its calls go out in one chunk as ``delta.tool_calls`` (``index``, ``id``, ``type``,
``function.name`` and the whole ``function.arguments``) with ``finish_reason: "tool_calls"``, as OpenAI clients
assemble them. An answer whose held-back text holds no well-formed call gets that text as a last content piece.
Formats without an opening marker (``gpt-oss``) hold back the whole answer.

Sources: OpenAI Chat Completions API reference (``tools``, ``tool_choice``, ``message.tool_calls``); vLLM's
OpenAI-compatible server (``--tool-call-parser``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic import ValidationError

from verl.experimental.agent_loop.chat import encode_prompt
from verl.experimental.agent_loop.openai_schemas import ChatCompletionRequest, ServeError
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.tools.schemas import OpenAIFunctionToolSchema

__all__ = [
    "ToolCallStream",
    "assistant_message",
    "template_messages",
    "tool_calls_active",
    "tool_chat_prompt",
    "uses_tools",
]


def tool_calls_active(body: ChatCompletionRequest) -> bool:
    """Whether the answer is parsed for tool calls: tools given and ``tool_choice`` ``"auto"`` (or unset)."""
    return bool(body.tools) and body.tool_choice in (None, "auto")


def uses_tools(body: ChatCompletionRequest) -> bool:
    """Whether the request needs this module: tools, a tool choice, or tool-call/tool messages."""
    has_tool_turns = any(m.role == "tool" or m.tool_calls for m in body.messages)
    return bool(body.tools) or body.tool_choice is not None or has_tool_turns


def _check(body: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The validated tool schemas of the request (empty for ``tool_choice: "none"``)."""
    if body.tool_choice not in (None, "auto", "none"):
        raise ServeError(
            400,
            f"tool_choice: {body.tool_choice!r} cannot be enforced by this server; use 'auto' or 'none'",
            "tool_choice",
            "unsupported_parameter",
        )
    if body.tool_choice is not None and not body.tools:
        raise ServeError(400, "tool_choice: set without tools", "tool_choice")
    schemas = []
    for i, tool in enumerate(body.tools or []):
        try:
            schemas.append(OpenAIFunctionToolSchema.model_validate(tool).model_dump(exclude_none=True))
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ServeError(400, f"tools[{i}]{'.' + where if where else ''}: {first['msg']}", "tools") from e
        if schemas[-1]["type"] != "function":
            raise ServeError(400, f"tools[{i}].type: only 'function' tools are supported", "tools")
    return schemas if tool_calls_active(body) else []


def _message(i: int, m: Any) -> dict[str, Any]:
    """One request message as the chat template reads it (tool-call arguments as objects, as HF templates expect)."""
    out: dict[str, Any] = {"role": m.role, "content": m.text()}
    if m.tool_calls:
        calls = []
        for k, call in enumerate(m.tool_calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ServeError(400, f"messages[{i}].tool_calls[{k}].function.name: required", "messages")
            args = fn.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError as e:
                    where = f"messages[{i}].tool_calls[{k}].function.arguments"
                    raise ServeError(400, f"{where}: not valid JSON: {e.msg}", "messages") from e
            function = {"name": fn["name"], "arguments": args}
            calls.append({"id": call.get("id"), "type": "function", "function": function})
        out["tool_calls"] = calls
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    return out


def template_messages(body: ChatCompletionRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(messages, tool schemas)`` of a chat request as the chat template reads them (validated; the schemas are
    empty unless tool calls are active)."""
    return [_message(i, m) for i, m in enumerate(body.messages)], _check(body)


def tool_chat_prompt(tokenizer: Any, body: ChatCompletionRequest) -> list[int]:
    """Prompt token ids of a request that :func:`uses_tools`: the messages (tool calls and tool replies included)
    and, unless ``tool_choice`` is ``"none"``, the tool schemas through the chat template."""
    messages, schemas = template_messages(body)
    if not getattr(tokenizer, "chat_template", None):
        raise ServeError(400, "messages: the model has no chat template; use /v1/completions", "messages")
    try:
        return encode_prompt(tokenizer, messages, schemas)
    except Exception as err:  # a template may reject a role order or a message shape
        raise ServeError(400, f"messages: the chat template rejected them: {err}", "messages") from err


def _function(call: Any) -> dict[str, str]:
    return {"name": call.name, "arguments": call.arguments}


def _call_id(call: Any) -> str:
    """The id the model gave the call (Kimi K2's ``functions.f:0``), else a new ``call_...`` id."""
    return call.tool_call_id or f"call_{uuid.uuid4().hex[:24]}"


def assistant_message(body: ChatCompletionRequest, text: str, finish_reason: str, parser: ToolParser) -> tuple:
    """``(message, finish_reason)`` of one choice: with ``tool_calls`` and ``"tool_calls"`` when tools are active
    and ``text`` holds well-formed calls, else the plain assistant message."""
    if not tool_calls_active(body):
        return {"role": "assistant", "content": text}, finish_reason
    turn = parser.parse_text(text, body.tools)
    if not turn.calls:
        return {"role": "assistant", "content": text}, finish_reason
    calls = [{"id": _call_id(c), "type": "function", "function": _function(c)} for c in turn.calls]
    content = turn.content.strip() or None
    return {"role": "assistant", "content": content, "tool_calls": calls}, "tool_calls"


def _tool_call_deltas(calls: list[Any]) -> list[dict[str, Any]]:
    return [{"index": i, "id": _call_id(c), "type": "function", "function": _function(c)} for i, c in enumerate(calls)]


class ToolCallStream:
    """Turns the streamed text pieces of one answer into chat-completion chunk deltas (see the module docstring).

    ``feed(piece)`` returns the content that can go out now; ``finish(finish_reason)`` returns the last deltas and
    the choice's ``finish_reason`` once the answer is complete.
    """

    def __init__(self, parser: ToolParser) -> None:
        self.parser = parser
        self.text = ""  # the whole answer so far
        self.sent = 0  # characters of ``text`` already streamed as content
        self.held = False  # a call marker was seen (or the format has none): nothing more streams before the end

    def feed(self, piece: str) -> str:
        """Add a piece; return the content safe to stream (never a prefix of the call marker)."""
        self.text += piece
        marker = self.parser.call_start
        if self.held or not marker:
            self.held = True
            return ""
        at = self.text.find(marker, self.sent)
        if at >= 0:
            self.held = True
            out, self.sent = self.text[self.sent : at], at
            return out
        # keep back a tail that could be the start of the marker
        end = len(self.text)
        for k in range(min(len(marker) - 1, end - self.sent), 0, -1):
            if marker.startswith(self.text[end - k :]):
                end -= k
                break
        out, self.sent = self.text[self.sent : end], end
        return out

    def finish(self, finish_reason: str) -> tuple[list[dict[str, Any]], str]:
        """``(deltas, finish_reason)``: the calls (``"tool_calls"``) or the held-back text as content."""
        rest = self.text[self.sent :]
        turn = self.parser.parse_text(rest) if rest else None
        if turn is not None and turn.calls:
            deltas = []
            if turn.content.strip():
                deltas.append({"content": turn.content})
            deltas.append({"tool_calls": _tool_call_deltas(turn.calls)})
            return deltas, "tool_calls"
        return ([{"content": rest}] if rest else []), finish_reason
