"""An agent written with the ``openai`` SDK's function calling that must use its tool: it answers "what is the
locker code of NAME?", and the codes exist only in the ``lookup`` tool's table (made-up numbers no model can know).
Its first messages show one worked example of the tool-call format, so a small model calls the tool now and then
from the start.

Reward (its own): 1.0 when the final answer holds the right code; 0.1 for a well-formed ``lookup`` call that did not
lead to the right code (the tool use is rewarded a little, the answer more); 0 otherwise.

Trained unchanged with ``actor_rollout_ref.rollout.agent.openai.agent=examples/any_agent/lookup_agent.py:run``
(``examples/any_agent/run_lookup_agent.sh``, ``docs/any_agent.md``). Against any OpenAI server::

    python examples/any_agent/lookup_agent.py --base-url http://127.0.0.1:8000/v1 Alice
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from openai import AsyncOpenAI

NAMES = (
    "Alice Bruno Chen Dmitri Elena Farid Greta Hiro Ines Jonas Kiri Lena Mateo Nadia Oskar Priya Quinn Rosa Sami "
    "Tomas Uma Viktor Wen Ximena Yusuf Zora Amara Bjorn Carmen Dario Esme Felix Gita Hugo Ilya Jana Kofi Luca Mira "
    "Nils Olga Pablo Rania Sven Tara Ugo Vera Wim Yara Zane Anouk Boris Celia Diego Eda Femi Gus Hana Ivo Juno"
).split()
CODES = {name: random.Random(f"locker-{name}").randint(100, 999) for name in NAMES}  # the tool's database
SYSTEM = (
    "You find locker codes with the lookup tool. Call it by replying with only a <tool_call> line, as in the example."
)
# one worked example as chat turns: SmolLM2's template does not render `tools`, so the model sees the format here
EXAMPLE = [
    {"role": "user", "content": "What is the locker code of Bob?"},
    {"role": "assistant", "content": '<tool_call>{"name": "lookup", "arguments": {"name": "Bob"}}</tool_call>'},
    {"role": "tool", "content": "Bob's locker code is 123."},
    {"role": "assistant", "content": "Bob's locker code is 123."},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "The locker code of a person.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "the person's first name"}},
                "required": ["name"],
            },
        },
    }
]
MAX_TURNS = 3
MAX_TOKENS = 40  # per request


QUESTIONS = ("What is the locker code of {}?", "Which code opens {}'s locker?", "Tell me {}'s locker code.")


def question(name: str, form: int = 0) -> str:
    """The user's question about ``name`` (``form`` picks one of :data:`QUESTIONS`)."""
    return QUESTIONS[form].format(name)


def lookup(name: str) -> str:
    """The tool: the code of ``name``, or a not-found text."""
    key = name.strip().capitalize()
    return f"{key}'s locker code is {CODES[key]}." if key in CODES else f"no person named {name!r}"


async def solve(client: AsyncOpenAI, user: str, model: str = "policy") -> tuple[str, int]:
    """Ask, run the lookup calls the model makes (up to ``MAX_TURNS`` requests); ``(last answer, valid calls)``."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, *EXAMPLE]
    messages.append({"role": "user", "content": user})
    answer, calls = "", 0
    for _ in range(MAX_TURNS):
        response = await client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, max_tokens=MAX_TOKENS
        )
        message = response.choices[0].message
        answer = message.content or ""
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))  # the assistant turn exactly as returned
        for call in message.tool_calls:
            try:
                name = json.loads(call.function.arguments).get("name", "")
            except (json.JSONDecodeError, AttributeError):
                name = ""
            calls += call.function.name == "lookup" and isinstance(name, str) and bool(name)
            result = lookup(name) if call.function.name == "lookup" and isinstance(name, str) else "unknown tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return answer, calls


def score(answer: str, calls: int, code: int) -> float:
    """1.0 for the right code in the answer, 0.1 for a valid lookup call without it, else 0."""
    if str(code) in answer:
        return 1.0
    return 0.1 if calls else 0.0


async def run(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """The training entry point: answer the row's question; the reward is :func:`score`."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        answer, calls = await solve(client, task["messages"][-1]["content"])
    return score(answer, calls, int(task["extra_info"]["answer"]))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--model", default="policy")
    args = parser.parse_args()

    async def main() -> None:
        async with AsyncOpenAI(base_url=args.base_url, api_key=args.api_key) as client:
            print(await solve(client, question(args.name), args.model))

    asyncio.run(main())
