"""A smolagents ``ToolCallingAgent`` that knows nothing of verl: it answers arithmetic questions with a
``calculator`` tool and its ``final_answer`` tool, through smolagents' ``OpenAIServerModel``.

Trained unchanged with ``actor_rollout_ref.rollout.agent.openai.agent=examples/any_agent/smolagents_agent.py:run``
(``docs/any_agent.md``): the rollout gives each trajectory a ``base_url`` and a key of its own, which go where any
OpenAI-compatible server's would (``api_base``, ``api_key``). The same file runs against ``verl serve`` or any
OpenAI server::

    python examples/any_agent/smolagents_agent.py --base-url http://127.0.0.1:8000/v1 "What is 12 + 30?"

Needs ``pip install smolagents`` (the ``agents`` extra).
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

from smolagents import OpenAIServerModel, ToolCallingAgent, tool

MAX_STEPS = 3
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.USub: operator.neg}  # fmt: skip


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.operand))
    raise ValueError("only numbers and + - * / are allowed")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses.

    Args:
        expression: the expression, e.g. 12 * (3 + 4)
    """
    try:
        result = _value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as e:
        return f"error: {e}"
    return str(int(result)) if float(result).is_integer() else f"{result:.6g}"


def make_agent(base_url: str, api_key: str, model: str = "policy", max_tokens: int = 128) -> ToolCallingAgent:
    """A quiet ``ToolCallingAgent`` with the calculator, talking to the OpenAI server at ``base_url``."""
    llm = OpenAIServerModel(model_id=model, api_base=base_url, api_key=api_key, max_tokens=max_tokens)
    return ToolCallingAgent(tools=[calculator], model=llm, max_steps=MAX_STEPS, verbosity_level=0)


def score(answer: Any, expected: str) -> float:
    """1.0 when the last number in the agent's final answer is ``expected``."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", str(answer).replace(",", ""))
    return float(bool(numbers) and numbers[-1] == str(expected).strip())


def run(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """The training entry point (a plain function: smolagents is synchronous): run the agent on the row's question;
    the reward is whether its final answer is right."""
    question = task["messages"][-1]["content"]
    answer = make_agent(base_url, api_key).run(question)
    return score(answer, task["extra_info"]["answer"])


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--model", default="policy")
    args = parser.parse_args()
    print(make_agent(args.base_url, args.api_key, args.model).run(args.question))
