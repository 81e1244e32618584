"""Tool calls parsed in the model's format: Hermes (Qwen) and gpt-oss; malformed calls are errors, not raises."""

from __future__ import annotations

import pytest

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser


def test_hermes_calls_content_and_malformed_calls(tok) -> None:
    parser = ToolParser.get_tool_parser("hermes", tok)
    text = (
        'Let me compute. <tool_call>\n{"name": "calculator", "arguments": {"expression": "1+2"}}\n</tool_call>'
        '<tool_call>{"name": "search", "arguments": "{\\"query_list\\": [\\"x\\"]}"}</tool_call>'
        "<tool_call>{oops}</tool_call><tool_call>[1, 2]</tool_call>"
        '<tool_call>{"arguments": {}}</tool_call><tool_call>{"name": "f", "arguments": 3}</tool_call>'
    )
    turn = parser.parse_ids(tok.encode(text, add_special_tokens=False) + [tok.eos_token_id])
    assert turn.calls == [
        FunctionCall("calculator", '{"expression": "1+2"}'),
        FunctionCall("search", '{"query_list": ["x"]}'),
    ]
    assert turn.content == "Let me compute. <eos>"
    assert len(turn.errors) == 4
    assert turn.errors[0].startswith("tool call is not valid JSON")
    assert "must be a JSON object" in turn.errors[1]
    assert "has no function name" in turn.errors[2]
    assert "arguments of tool call 'f' must be a JSON object, got int" in turn.errors[3]
    unclosed = parser.parse_text('<tool_call>{"name": "calculator", "argum')
    assert unclosed.calls == [] and unclosed.errors == ["a <tool_call> tag is not closed by </tool_call>"]
    assert parser.parse_text("just text").errors == []


def test_gpt_oss_calls_and_analysis_channel(tok) -> None:
    parser = ToolParser.get_tool_parser("gpt-oss", tok)
    text = (
        "<|channel|>analysis<|message|>I should add.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.calculator <|constrain|>json"
        '<|message|>{"expression": "2*21"}<|call|>'
    )
    turn = parser.parse_text(text)
    assert turn.calls == [FunctionCall("calculator", '{"expression": "2*21"}')] and turn.errors == []
    assert "I should add" not in turn.content
    recipient_first = parser.parse_text(
        '<|start|>assistant to=functions.get<|channel|>commentary json<|message|>{"a": 1}<|call|>'
    )
    assert recipient_first.calls == [FunctionCall("get", '{"a": 1}')]
    bad = parser.parse_text("<|channel|>commentary to=functions.get <|constrain|>json<|message|>{nope<|call|>")
    assert bad.calls == [] and bad.errors[0].startswith("arguments of tool call 'get' are not valid JSON")
    final = parser.parse_text("<|channel|>final<|message|>The answer is 42.<|return|>")
    assert final.calls == [] and final.content == "The answer is 42."


def test_unknown_format_lists_the_known_ones(tok) -> None:
    with pytest.raises(
        ValueError, match=r"multi_turn.format='xml' is unknown; known formats: \['gpt-oss', 'hermes', 'kimi'\]"
    ):
        ToolParser.get_tool_parser("xml", tok)
