"""An agent written with the ``openai`` SDK's function calling that knows nothing of verl: it answers arithmetic
questions, may call a ``calculator`` tool it runs itself, and scores its own answer.

Trained unchanged with ``actor_rollout_ref.rollout.agent.openai.agent=examples/any_agent/calculator_agent.py:run``
(``examples/any_agent/run_any_agent.sh``, ``docs/any_agent.md``): the rollout hands it a ``base_url`` and a key of
its own for each trajectory. The same code runs against any OpenAI-compatible server, e.g. a trained model under
``verl serve``::

    python examples/any_agent/calculator_agent.py --base-url http://127.0.0.1:8000/v1 "What is 12 + 30?"
"""

from __future__ import annotations

import ast
import asyncio
import json
import operator
import re
from typing import Any

from openai import AsyncOpenAI

SYSTEM = "You are a careful math assistant."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 12 * (3 + 4)"}},
                "required": ["expression"],
            },
        },
    }
]
MAX_TURNS = 3
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.USub: operator.neg}  # fmt: skip


def calculate(expression: str) -> str:
    """The value of an arithmetic expression (numbers, + - * /, parentheses), or an error text."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.operand))
        raise ValueError("only numbers and + - * / are allowed")

    try:
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as e:
        return f"error: {e}"
    return str(int(result)) if float(result).is_integer() else f"{result:.6g}"


async def solve(client: AsyncOpenAI, question: str, model: str = "policy") -> str:
    """Ask the model, run the calculator calls it makes (up to ``MAX_TURNS`` requests); its last answer's text."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    answer = ""
    for _ in range(MAX_TURNS):
        response = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=48)
        message = response.choices[0].message
        answer = message.content or ""
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))  # the assistant turn exactly as returned
        for call in message.tool_calls:
            try:
                expression = json.loads(call.function.arguments).get("expression", "")
            except (json.JSONDecodeError, AttributeError):
                expression = ""
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculate(str(expression))})
    return answer


def score(answer: str, expected: str) -> float:
    """1.0 when the last number in ``answer`` is ``expected``."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", answer.replace(",", ""))
    return float(bool(numbers) and numbers[-1] == str(expected).strip())


async def run(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """The training entry point: solve the row's question; the reward is whether the answer is right."""
    question = task["messages"][-1]["content"]
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        answer = await solve(client, question)
    return score(answer, task["extra_info"]["answer"])


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--model", default="policy")
    args = parser.parse_args()

    async def main() -> None:
        async with AsyncOpenAI(base_url=args.base_url, api_key=args.api_key) as client:
            print(await solve(client, args.question, args.model))

    asyncio.run(main())
