"""The id a model gives its tool call (Kimi K2's ``functions.f:0``) is kept: on the parsed call, in the assistant
message's ``tool_calls`` and as the tool message's ``tool_call_id``, which the chat template renders; parsers written
for upstream's async ``extract_tool_calls`` run in the loop; the loop's states and its ``extra_fields``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from verl.base_config import omega_conf_to_dataclass
from verl.experimental.agent_loop.agent_loop import AgentLoopSettings
from verl.experimental.agent_loop.tool_agent_loop import AgentState, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, KimiToolParser, ParsedTurn, ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.workers.config import RolloutConfig
from verl.workers.rollout.request_server import TokenOutput


def _kimi_call(call_id: str, arguments: str) -> str:
    return f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>"


def _section(*calls: str) -> str:
    return "<|tool_calls_section_begin|>" + "".join(calls) + "<|tool_calls_section_end|>"


def _schema(name: str) -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {"name": name}})


def test_kimi_parser_keeps_the_model_ids_and_names_the_functions(tok) -> None:
    parser = ToolParser.get_tool_parser("kimi", tok)
    assert isinstance(parser, KimiToolParser)
    text = "Checking." + _section(
        _kimi_call("functions.get_weather:0", '{"city": "Paris"}'), _kimi_call("functions.search:1", "{}")
    )
    turn = parser.parse_text(text)
    assert turn.content == "Checking." and turn.errors == []
    assert turn.calls == [
        FunctionCall("get_weather", '{"city": "Paris"}', tool_call_id="functions.get_weather:0"),
        FunctionCall("search", "{}", tool_call_id="functions.search:1"),
    ]
    # an id of another shape names the one tool whose name it contains (the longest of nested names)
    tools = [_schema("search"), _schema("search_web"), _schema("get_weather")]
    assert KimiToolParser.name_of("call-get_weather-0", tools) == "get_weather"
    assert KimiToolParser.name_of("search_web-3", tools) == "search_web"
    assert KimiToolParser.name_of("lookup-1", tools) == "lookup-1"  # the loop answers: unknown tool
    assert KimiToolParser.name_of("functions.lookup:2") == "lookup"
    # upstream's interface: (content, calls), awaited
    content, calls = asyncio.run(parser.extract_tool_calls(tok.encode(text, add_special_tokens=False), tools))
    assert content == "Checking." and [c.tool_call_id for c in calls] == [
        "functions.get_weather:0",
        "functions.search:1",
    ]
    # malformed: arguments not JSON, a call without its end marker, a section never closed
    bad = parser.parse_text("x" + _section(_kimi_call("functions.f:0", "{nope")))
    assert bad.calls == [] and bad.errors[0].startswith("arguments of tool call 'f' are not valid JSON")
    open_section = parser.parse_text("<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0")
    assert open_section.calls == [] and len(open_section.errors) == 2
    assert parser.parse_text("plain answer") == ParsedTurn(content="plain answer")


class _UpstreamStyleParser(ToolParser):
    """A parser written against upstream's interface only (async extract_tool_calls, no parse_text)."""

    async def extract_tool_calls(self, responses_ids: list[int], tools: Any = None) -> tuple[str, list[FunctionCall]]:
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=False)
        if not text.startswith("CALL "):
            return text, []
        return "", [FunctionCall(name=text.split()[1], arguments="{}", tool_call_id="up-7")]


def test_a_parser_written_for_upstream_parses_the_loops_turns(tok) -> None:
    parser = _UpstreamStyleParser(tok)
    turn = asyncio.run(parser.parse_turn(tok.encode("CALL echo", add_special_tokens=False)))
    assert turn == ParsedTurn(content="", calls=[FunctionCall("echo", "{}", tool_call_id="up-7")])
    with pytest.raises(NotImplementedError, match="implements neither parse_text nor extract_tool_calls"):
        ToolParser(tok).parse_text("x")


class EchoTool(BaseTool):
    """Echoes its ``text`` argument; step reward 0.25."""

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return _schema("echo")

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        return ToolResponse(text=f"echo:{parameters.get('text', '')}"), 0.25, {}


class _Server:
    """Answers each request with the next scripted reply and EOS; records the prompts."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.prompts, self.stops = tokenizer, list(replies), [], []

    async def generate(self, prompt_ids: list[int], max_tokens: int, **kwargs: Any) -> TokenOutput:
        self.prompts.append(list(prompt_ids))
        stops = list(kwargs.get("stop_token_ids", ()))
        self.stops.append(stops)
        ids = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False) + [self.tokenizer.eos_token_id]
        for k, token in enumerate(ids[:-1]):
            if token in stops:  # the engine ends the answer at a stop id, which it keeps
                return TokenOutput(token_ids=ids[: k + 1], log_probs=None, stop_reason="stop")
        return TokenOutput(token_ids=ids, log_probs=None, stop_reason="eos")


class _Recorder:
    """An interaction that records the conversation it is shown and scores 0.5, then ends the episode."""

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    async def start_interaction(self, **kwargs: Any) -> str:
        return "i0"

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any):
        self.seen.append([dict(m) for m in messages])
        return True, "", 0.5, {}

    async def finalize_interaction(self, instance_id: str) -> None:
        return None


# the tool message's tool_call_id is rendered, as Kimi K2's template does ("## Return of <id>")
ID_TEMPLATE = (
    "{% if tools %}<|system|>{{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>{% if m.tool_call_id %}[{{ m.tool_call_id }}]{% endif %}"
    "{{ m['content'] }}{% if m['role'] == 'assistant' %}<eos>{% else %}{{ '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _loop(kit, replies: list[str], interaction: Any = None, **multi_turn: Any) -> tuple[ToolAgentLoop, _Server]:
    tok = kit.chat_tokenizer(ID_TEMPLATE)
    section = omega_conf_to_dataclass(kit.rollout_config(format="kimi", **multi_turn), RolloutConfig)
    server = _Server(tok, replies)
    interactions = {"rec": interaction} if interaction is not None else {}
    loop = ToolAgentLoop(
        AgentLoopSettings.from_rollout_config(section), server, tok, {"echo": EchoTool({}, None)}, interactions
    )
    return loop, server


def test_the_tool_message_answers_the_model_call_id_and_the_template_renders_it(kit) -> None:
    call = _section(_kimi_call("functions.echo:0", '{"text": "hi"}'), _kimi_call("functions.echo:1", "{}"))
    recorder = _Recorder()
    loop, server = _loop(kit, ["Let me echo." + call, "done"], recorder, max_parallel_calls=2)
    extra_info = {"interaction_kwargs": {"name": "rec"}}
    out = asyncio.run(loop.run({}, raw_prompt=[{"role": "user", "content": "Q1"}], extra_info=extra_info))
    tok = loop.tokenizer
    tool_text = tok.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert tool_text == "<|tool|>[functions.echo:0]echo:hi\n<|tool|>[functions.echo:1]echo:\n<|assistant|>"
    assert tok.decode(server.prompts[1]).endswith(tool_text)  # what the model saw next
    assert out.metrics["sanity_mismatch"] is False  # the transcript renders to the generated tokens
    # the interaction reads the conversation in chat form: the turn without its markup, its calls with their ids
    assistant, tool0, tool1 = recorder.seen[0][1:4]
    assert assistant == {
        "role": "assistant",
        "content": "Let me echo.",
        "tool_calls": [
            {"type": "function", "function": {"name": "echo", "arguments": {"text": "hi"}}, "id": "functions.echo:0"},
            {"type": "function", "function": {"name": "echo", "arguments": {}}, "id": "functions.echo:1"},
        ],
    }
    assert (tool0["tool_call_id"], tool1["tool_call_id"]) == ("functions.echo:0", "functions.echo:1")
    assert out.extra_fields == {"turn_scores": [0.5], "tool_rewards": [0.25, 0.25]}
    assert out.reward_score == pytest.approx(1.0)


def test_calls_beyond_max_parallel_calls_are_answered_under_their_ids(kit) -> None:
    call = _section(*(_kimi_call(f"functions.echo:{k}", "{}") for k in range(3)))
    loop, _ = _loop(kit, [call, "done"], max_parallel_calls=2)
    out = asyncio.run(loop.run({}, raw_prompt=[{"role": "user", "content": "Q1"}]))
    tool_text = loop.tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert "[functions.echo:2]Error: call of 'echo' not run: at most 2 tool calls per turn" in tool_text
    assert out.extra_fields["tool_rewards"] == [0.25, 0.25]


def test_build_assistant_message_and_the_state_handlers_a_subclass_overrides(kit) -> None:
    loop, _ = _loop(kit, [])
    turn = type("Turn", (), {"tool_calls": [FunctionCall("f", "[1]"), FunctionCall("g", '{"a": 1}', "id-g")]})()
    message = loop._build_assistant_message("", turn)
    assert message["content"] == "" and message["tool_calls"] == [
        {"type": "function", "function": {"name": "f", "arguments": "[1]"}},  # not an object: kept as written
        {"type": "function", "function": {"name": "g", "arguments": {"a": 1}}, "id": "id-g"},
    ]
    assert loop._build_assistant_message("hi", type("Turn", (), {"tool_calls": []})()) == {
        "role": "assistant",
        "content": "hi",
    }

    class OneShot(ToolAgentLoop):
        """Ends every episode after its first tool results, without another generation."""

        async def _handle_processing_tools_state(self, ep: Any) -> AgentState:
            await super()._handle_processing_tools_state(ep)
            return AgentState.TERMINATED

    tok = loop.tokenizer
    server = _Server(tok, [_section(_kimi_call("functions.echo:0", "{}")), "never asked"])
    one_shot = OneShot(loop.settings, server, tok, loop.tools, {})
    out = asyncio.run(one_shot.run({}, raw_prompt=[{"role": "user", "content": "Q1"}]))
    assert len(server.prompts) == 1 and out.metrics["assistant_turns"] == 1
    assert out.extra_fields["tool_rewards"] == [0.25]


class _StopAtBang(ToolParser):
    """A format whose calls are ``call NAME!``; the model would write on after ``!``, so ``!`` is a stop token."""

    @property
    def stop_token_ids(self) -> list[int]:
        return [self.tokenizer.convert_tokens_to_ids("!")]

    def parse_text(self, text: str, tools: Any = None) -> ParsedTurn:
        if text.startswith("call ") and text.endswith("!"):
            return ParsedTurn(content="", calls=[FunctionCall(text[5:-1], "{}")])
        return ParsedTurn(content=text)


def test_a_parsers_stop_tokens_end_the_turn_and_stay_in_its_text(kit) -> None:
    loop, server = _loop(kit, ["call echo! and then rambling", "done"])
    loop.parser = _StopAtBang(loop.tokenizer)
    out = asyncio.run(loop.run({}, raw_prompt=[{"role": "user", "content": "Q1"}]))
    bang = loop.tokenizer.convert_tokens_to_ids("!")
    assert server.stops == [[bang], [bang]]
    tok = loop.tokenizer
    first_turn = tok.encode("call echo!", add_special_tokens=False)
    assert out.response_ids[: len(first_turn)] == first_turn
    assert out.response_mask[: len(first_turn)] == [1] * len(first_turn)
    assert out.metrics["tool_calls"] == {"echo": 1} and out.metrics["truncated"] is False
    # Kimi K2's <|im_end|> is a stop token only where the tokenizer has it as one token
    assert KimiToolParser(tok).stop_token_ids == []
    assert KimiToolParser(_Vocab("<|im_end|>")).stop_token_ids == [7]
    assert KimiToolParser(_Vocab("<unk>")).stop_token_ids == []  # an unknown token read as the unk id


class _Vocab:
    """A tokenizer whose every token is id 7, which reads back as ``token``."""

    def __init__(self, token: str) -> None:
        self.token = token

    def convert_tokens_to_ids(self, token: str) -> int:
        return 7

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return self.token


def test_the_openai_endpoint_answers_with_the_model_call_ids(tok) -> None:
    from verl.experimental.agent_loop.openai_schemas import ChatCompletionRequest
    from verl.experimental.agent_loop.openai_tool_calls import ToolCallStream, assistant_message

    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    body = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "tools": tools})
    parser = ToolParser.get_tool_parser("kimi", tok)
    text = "Sure." + _section(_kimi_call("call-get_weather-0", '{"city": "Oslo"}'))
    message, finish = assistant_message(body, text, "stop", parser)
    assert finish == "tool_calls" and message["content"] == "Sure."
    assert message["tool_calls"] == [
        {
            "id": "call-get_weather-0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
    ]
    stream = ToolCallStream(parser)
    assert stream.feed("Sure.") == "Sure." and stream.feed(_section(_kimi_call("functions.f:0", "{}"))) == ""
    deltas, finish = stream.finish("stop")
    assert finish == "tool_calls" and deltas[-1]["tool_calls"][0]["id"] == "functions.f:0"
    hermes = ToolParser.get_tool_parser("hermes", tok)
    plain, _ = assistant_message(
        body, '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>', "stop", hermes
    )
    assert plain["tool_calls"][0]["id"].startswith("call_")  # no id from the model: a new one
