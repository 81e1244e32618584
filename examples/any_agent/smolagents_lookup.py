"""The locker-code task of ``lookup_agent.py`` written with smolagents, as its users write it: a ``ToolCallingAgent``
with a ``lookup`` tool, an ``OpenAIServerModel`` and short prompt templates of its own (smolagents' default system
prompt is about 1,000 SmolLM2 tokens, more than a 135M model follows).

How the prompt fits smolagents: each step the agent sends its memory (system prompt, ``New task:``, then per step the
model's text, ``Calling tools: [...]`` and ``Observation: ...``) and takes the tool call from the reply: the
endpoint's ``message.tool_calls`` when the model wrote a ``<tool_call>{...}</tool_call>`` line, else the first
``{`` ... last ``}`` of the text with keys ``name`` and ``arguments``. A ``final_answer`` call ends the run with its
``answer``. So the system prompt lists the tools and shows one worked example of that format: the lookup call, the
observation, the final answer. After ``MAX_STEPS`` steps without ``final_answer``, smolagents asks once more
(``final_answer`` templates below) and returns that reply's text.

Reward (the agent's own, like ``lookup_agent.py``): 1.0 when the final answer holds the right code; 0.1 for a
well-formed ``lookup`` call that did not lead to it; 0 otherwise. Data: ``make_lookup_data.py`` (the same rows).

Trained unchanged with ``actor_rollout_ref.rollout.agent.openai.agent=examples/any_agent/smolagents_lookup.py:run``
(``run_smolagents_lookup.sh``, ``docs/any_agent.md``). Against any OpenAI server::

    python examples/any_agent/smolagents_lookup.py --base-url http://127.0.0.1:8000/v1 Alice
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from smolagents import OpenAIServerModel, ToolCallingAgent, tool
from smolagents.agents import PromptTemplates
from smolagents.memory import ActionStep
from smolagents.models import REMOVE_PARAMETER

_spec = importlib.util.spec_from_file_location(
    "lookup_agent", os.path.join(os.path.dirname(os.path.abspath(__file__)), "lookup_agent.py")
)
_lookup_agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_lookup_agent)
CODES: dict[str, int] = _lookup_agent.CODES  # the tool's database: the same made-up codes as lookup_agent.py
question = _lookup_agent.question

MAX_STEPS = 2  # the lookup, then final_answer
MAX_TOKENS = 48  # per request
# smolagents renders this with Jinja: ``tools`` is the agent's name -> Tool map (``final_answer`` included)
SYSTEM_PROMPT = """You do not know any locker codes: only the lookup tool knows them. Reply with one tool call only:
<tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>
Tools:
{%- for tool in tools.values() %}
- {{ tool.name }}({{ tool.inputs.keys() | join(", ") }}): {{ tool.description }}
{%- endfor %}
Example:
New task:
What is the locker code of Bob?
<tool_call>{"name": "lookup", "arguments": {"name": "Bob"}}</tool_call>
Observation: Bob's locker code is 123.
<tool_call>{"name": "final_answer", "arguments": {"answer": "123"}}</tool_call>"""
PROMPTS = PromptTemplates(
    system_prompt=SYSTEM_PROMPT,
    planning={"initial_plan": "", "update_plan_pre_messages": "", "update_plan_post_messages": ""},
    managed_agent={"task": "", "report": ""},
    final_answer={
        "pre_messages": "Answer the user's task from the tool results below.",
        "post_messages": "Task: {{task}}\nReply with the answer only.",
    },
)


@tool
def lookup(name: str) -> str:
    """The locker code of a person.

    Args:
        name: the person's first name
    """
    return _lookup_agent.lookup(name)


def make_agent(base_url: str, api_key: str, model: str = "policy", **model_kwargs: Any) -> ToolCallingAgent:
    """A quiet ``ToolCallingAgent`` with ``lookup`` and the short prompts, talking to the OpenAI server at
    ``base_url`` (``model_kwargs`` go to ``OpenAIServerModel``, e.g. ``temperature=0``). smolagents asks for
    ``tool_choice="required"``, which a server that does not constrain decoding refuses (``verl serve``) or reads as
    ``auto`` (the training endpoint); the agent drops the field (smolagents' ``REMOVE_PARAMETER``), so the server's
    default, ``auto``, applies everywhere."""
    llm = OpenAIServerModel(
        model_id=model,
        api_base=base_url,
        api_key=api_key,
        max_tokens=MAX_TOKENS,
        tool_choice=REMOVE_PARAMETER,
        **model_kwargs,
    )
    return ToolCallingAgent(tools=[lookup], model=llm, prompt_templates=PROMPTS, max_steps=MAX_STEPS, verbosity_level=0)


def lookup_calls(agent: ToolCallingAgent) -> int:
    """The well-formed ``lookup`` calls in the agent's memory (a call with a non-empty string ``name``)."""
    calls = 0
    for step in agent.memory.steps:
        for call in (step.tool_calls or []) if isinstance(step, ActionStep) else []:
            name = call.arguments.get("name") if isinstance(call.arguments, dict) else None
            calls += call.name == "lookup" and isinstance(name, str) and bool(name.strip())
    return calls


def score(answer: Any, calls: int, code: int) -> float:
    """1.0 for the right code in the final answer, 0.1 for a valid lookup call without it, else 0."""
    if str(code) in str(answer):
        return 1.0
    return 0.1 if calls else 0.0


def run(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """The training entry point (a plain function: smolagents is synchronous): run the agent on the row's question;
    the reward is :func:`score`."""
    agent = make_agent(base_url, api_key)
    answer = agent.run(task["messages"][-1]["content"])
    return score(answer, lookup_calls(agent), int(task["extra_info"]["answer"]))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--model", default="policy")
    parser.add_argument("--temperature", type=float, default=None)
    args = parser.parse_args()
    kwargs = {} if args.temperature is None else {"temperature": args.temperature}
    agent = make_agent(args.base_url, args.api_key, args.model, **kwargs)
    answer = agent.run(question(args.name))
    calls = lookup_calls(agent)
    print(answer, "| lookup calls:", calls, "| reward:", score(answer, calls, CODES[args.name.strip().capitalize()]))
