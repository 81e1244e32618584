"""verl.tools: the upstream tool-config format, the built-in tools, and the loader's errors."""

from __future__ import annotations

import asyncio
import json

import pytest

from verl.sandbox import sandbox_support
from verl.tools.calculator_tool import CalculatorError, CalculatorTool, safe_eval
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.tools.utils.bm25 import BM25Index
from verl.tools.utils.tool_registry import initialize_tools_from_config

# verl's examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml, as users have it (its trailing space
# after "config:" and its long description line included)
UPSTREAM_GSM8K = (
    """\
tools:
  - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"
    config:"""
    + " "
    + """
      type: native
    tool_schema:
      type: "function"
      function:
        name: "calc_gsm8k_reward"
        description: "A tool for calculating the reward of gsm8k. (1.0 if parsed answer is correct, 0.0 if """
    + """parsed answer is incorrect or not correctly parsed)"
        parameters:
          type: "object"
          properties:
            answer:
              type: "string"
              description: "The model's answer to the GSM8K math problem, must be a digits"
          required: ["answer"]
"""
)


def test_upstream_gsm8k_tool_config_loads_and_scores(tmp_path) -> None:
    path = tmp_path / "gsm8k_tool_config.yaml"
    path.write_text(UPSTREAM_GSM8K)
    (tool,) = initialize_tools_from_config(str(path))
    assert tool.name == "calc_gsm8k_reward"
    schema = tool.get_openai_tool_schema().model_dump(exclude_none=True)
    assert schema["function"]["parameters"]["required"] == ["answer"]

    async def episode() -> tuple:
        instance, created = await tool.create(ground_truth="72")  # verl's contract: (instance_id, ToolResponse)
        assert created == ToolResponse()
        wrong = await tool.execute(instance, {"answer": "71"})
        right = await tool.execute(instance, {"answer": "72"})
        again = await tool.execute(instance, {"answer": "72"})
        reward = await tool.calc_reward(instance)
        await tool.release(instance)
        return wrong, right, again, reward

    wrong, right, again, reward = asyncio.run(episode())
    assert (wrong[1], right[1], again[1]) == (-0.05, 0.0, -0.05)  # no improvement costs a step penalty
    assert right[0] == ToolResponse(text="Current parsed answer='72' reward=1.0")
    assert reward == 1.0


def test_tool_config_with_default_schemas_and_several_tools(tmp_path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps(d)
            for d in [
                {"contents": '"Paris"\nParis is the capital of France.'},
                {"title": "Berlin", "text": "Berlin is the capital of Germany."},
                {"contents": '"Rome"\nRome is in Italy; its river is the Tiber.'},
            ]
        )
    )
    path = tmp_path / "tools.yaml"
    path.write_text(
        "tools:\n"
        "  - class_name: verl.tools.calculator_tool.CalculatorTool\n    config: {type: native}\n"
        f"  - class_name: verl.tools.local_search_tool.LocalSearchTool\n    config: {{type: native, corpus_path: "
        f"{corpus}, topk: 1}}\n"
    )
    calc, search = initialize_tools_from_config(str(path))
    assert (calc.name, search.name) == ("calculator", "search")
    response, _, metrics = asyncio.run(search.execute("i", {"query_list": ["capital of Germany", "Tiber river"]}))
    assert response.text == (
        "Doc 1(Title: Berlin) Berlin is the capital of Germany.\n---\nDoc 1(Title: Rome) Rome is in Italy; its "
        "river is the Tiber."
    )
    assert metrics["num_hits"] == 2
    none, _, _ = asyncio.run(search.execute("i", {"query_list": ["zebra"]}))
    assert none.text == "No results."
    bad, _, bad_metrics = asyncio.run(search.execute("i", {"query_list": 3}))
    assert bad.text.startswith("Error:") and bad_metrics["ok"] is False


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("nothing: []\n", "expected a top-level 'tools:' list"),
        ("tools:\n  - config: {type: native}\n", "tools[0]: each entry needs class_name"),
        ("tools:\n  - class_name: verl.tools.nope.Tool\n", "cannot import module 'verl.tools.nope'"),
        ("tools:\n  - class_name: verl.tools.calculator_tool.Nope\n", "has no class 'Nope'"),
        ("tools:\n  - class_name: collections.OrderedDict\n", "is not a subclass of verl.tools.base_tool.BaseTool"),
        (
            "tools:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n    config: {type: sse}\n",
            "config.type='sse': one of 'native', 'mcp'",
        ),
        (
            "tools:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n    config: {type: mcp}\n",
            "config.type=mcp needs a subclass of verl.tools.mcp_base_tool.MCPBaseTool",
        ),
        (
            "tools:\n  - class_name: verl.tools.mcp_base_tool.MCPBaseTool\n    config: {type: mcp}\n",
            "config.type=mcp needs an 'mcp:' mapping with mcp_servers_config_path",
        ),
        (
            "tools:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n"
            "  - class_name: verl.tools.calculator_tool.CalculatorTool\n",
            "tools[1]: a tool named 'calculator' is already defined",
        ),
        (
            "tools:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n    tool_schema: {type: function}\n",
            "tools[0].tool_schema is not an OpenAI function schema",
        ),
        (
            "tools:\n  - class_name: verl.tools.local_search_tool.LocalSearchTool\n    config: {type: native}\n",
            "config.corpus_path (a JSON-lines corpus file) is required",
        ),
    ],
)
def test_bad_tool_configs_name_the_file_entry_and_key(tmp_path, body: str, fragment: str) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text(body)
    with pytest.raises(ValueError) as err:
        initialize_tools_from_config(str(path))
    assert fragment in str(err.value) and str(path) in str(err.value)


def test_missing_tool_config_file() -> None:
    with pytest.raises(FileNotFoundError, match="rollout.multi_turn.tool_config_path"):
        initialize_tools_from_config("/nonexistent/tools.yaml")


@pytest.mark.parametrize(
    ("expression", "value"),
    [("12*34", 408), ("(3 + 4) ** 2", 49), ("7 / 2", 3.5), ("-2 ** 2", -4), ("sqrt(16) + abs(-1)", 5.0)],
)
def test_calculator_evaluates_arithmetic(expression: str, value: float) -> None:
    assert safe_eval(expression) == value


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("__import__('os').system('true')", "unsupported element"),
        ("2 ** 10 ** 10", "exponent"),
        ("1/0", "division by zero"),
        ("x + 1", "unsupported element"),
        ("1 +", "syntax error"),
        ("(1).real", "unsupported element"),
    ],
)
def test_calculator_refuses_what_is_not_arithmetic(expression: str, fragment: str) -> None:
    with pytest.raises(CalculatorError, match=fragment.replace("*", r"\*")):
        safe_eval(expression)
    response, _, metrics = asyncio.run(CalculatorTool({}, None).execute("i", {"expression": expression}))
    assert response.text.startswith("Error:") and metrics["ok"] is False


def test_bm25_ranks_by_term_rarity_and_length() -> None:
    index = BM25Index(["the cat sat", "the dog sat on the mat with the cat", "a bird"])
    hits = index.search("cat", topk=3)
    assert [i for i, _ in hits] == [0, 1]  # the shorter document with the term ranks first
    assert index.search("the", topk=3)[0][0] == 1  # term frequency
    assert index.search("zebra") == []


@pytest.mark.skipif(not sandbox_support(), reason="this machine cannot build the sandbox")
def test_code_interpreter_runs_code_in_the_sandbox(tmp_path) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text(
        "tools:\n  - class_name: verl.tools.code_interpreter_tool.CodeInterpreterTool\n"
        "    config: {type: native, timeout_s: 5, max_output_chars: 64}\n"
    )
    (tool,) = initialize_tools_from_config(str(path))

    async def calls() -> list:
        return await asyncio.gather(
            tool.execute("i", {"code": "print(123456789 * 987654321)"}),
            tool.execute("i", {"code": "import socket; socket.create_connection(('127.0.0.1', 9))"}),
            tool.execute("i", {"code": "print('x' * 1000)"}),
            tool.execute("i", {"code": ""}),
        )

    ok, net, long, empty = asyncio.run(calls())
    assert ok[0].text == "121932631112635269\n" and ok[2]["ok"] is True
    assert "Error (exit code 1)" in net[0].text and net[2]["ok"] is False
    assert long[0].text == "x" * 64 + "\n...(truncated)"
    assert empty[0].text == "Error: 'code' must be a non-empty string"


def test_instance_id_of_accepts_verls_pair_and_a_bare_id() -> None:
    from verl.tools.base_tool import BaseTool, instance_id_of

    assert instance_id_of("t", ("abc", ToolResponse())) == "abc" and instance_id_of("t", "abc") == "abc"
    with pytest.raises(TypeError, match="tool 't': create must return \\(instance_id, ToolResponse\\)"):
        instance_id_of("t", 42)
    tool = BaseTool({}, OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {"name": "t"}}))
    instance, response = asyncio.run(tool.create())
    assert isinstance(instance, str) and len(instance) == 36 and response == ToolResponse()
    assert asyncio.run(tool.create("mine"))[0] == "mine"
