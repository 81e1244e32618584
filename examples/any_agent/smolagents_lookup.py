"""The locker-code task of ``lookup_agent.py`` written with smolagents, as its users write it: a ``ToolCallingAgent``
with a ``lookup`` tool, an ``OpenAIServerModel``, short prompt templates of its own (smolagents' default system
prompt is about 1,000 SmolLM2 tokens, more than a 135M model follows) and one worked example put in the agent's
memory before the run, as the turns of an earlier task (``agent.memory.steps``, then ``agent.run(task, reset=False)``).

How a run goes: smolagents sends its memory (system prompt, ``New task:``, per step the model's text, ``Calling
tools: [...]`` and ``Observation: ...``; the worked example's steps come first) and takes the tool call from the
reply: the endpoint's ``message.tool_calls`` when the model wrote a ``<tool_call>{...}</tool_call>`` line, else the
first ``{`` ... last ``}`` of the text with keys ``name`` and ``arguments``. ``MAX_STEPS = 1``: the one tool step is
the lookup; then smolagents asks for the final answer (``final_answer`` templates below, the memory in between) and
returns that reply's text. Two requests, each one reply.

Reward (the agent's own, like ``lookup_agent.py``): 1.0 when the final answer holds the right code; 0.1 for a
well-formed ``lookup`` call that did not lead to it; 0 otherwise. Data: ``make_lookup_data.py`` (the same rows).

Trained unchanged with ``actor_rollout_ref.rollout.agent.openai.agent=examples/any_agent/smolagents_lookup.py:run``
(``run_smolagents_lookup.sh``, ``docs/any_agent.md``). Against any OpenAI server::

    python examples/any_agent/smolagents_lookup.py --base-url http://127.0.0.1:8000/v1 Alice
    # every held-out question, twice each, sampled at T=0.7: mean reward, lookup calls, share rewarded
    python examples/any_agent/smolagents_lookup.py --base-url http://127.0.0.1:8000/v1 --held-out --samples 2 \\
        --temperature 0.7
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from smolagents import OpenAIServerModel, ToolCallingAgent, tool
from smolagents.agents import PromptTemplates
from smolagents.memory import ActionStep, MemoryStep, TaskStep, ToolCall
from smolagents.models import REMOVE_PARAMETER
from smolagents.monitoring import LogLevel, Timing

_spec = importlib.util.spec_from_file_location(
    "lookup_agent", os.path.join(os.path.dirname(os.path.abspath(__file__)), "lookup_agent.py")
)
_lookup_agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_lookup_agent)
CODES: dict[str, int] = _lookup_agent.CODES  # the tool's database: the same made-up codes as lookup_agent.py
question = _lookup_agent.question

MAX_STEPS = 1  # the lookup; the answer then comes from smolagents' final-answer request
MAX_TOKENS = 40  # per request: a lookup call is about 25 tokens
# short: the format is shown by the worked example's turns (SmolLM2's chat template does not render ``tools``)
SYSTEM_PROMPT = """You find locker codes with the lookup tool. Call it by replying with only a <tool_call> line, \
as in the example."""
PROMPTS = PromptTemplates(
    system_prompt=SYSTEM_PROMPT,
    planning={"initial_plan": "", "update_plan_pre_messages": "", "update_plan_post_messages": ""},
    managed_agent={"task": "", "report": ""},
    final_answer={
        "pre_messages": "Answer the task from the lookup tool's observation.",
        "post_messages": "Task: {{task}}",
    },
)
EXAMPLE_NAME, EXAMPLE_CODE = "Bob", 123  # not one of CODES' names


def example_steps() -> list[MemoryStep]:
    """One worked example as smolagents memory steps, the shape of a finished run: the task, an action step with the
    model's ``<tool_call>`` line, the ``lookup`` call and its observation, then an action step with the answer text.
    smolagents sends them as turns (user ``New task:``, assistant call, user ``Observation:``, assistant answer)."""
    call = ToolCall(name="lookup", arguments={"name": EXAMPLE_NAME}, id="call_0")
    line = f'<tool_call>{{"name": "lookup", "arguments": {{"name": "{EXAMPLE_NAME}"}}}}</tool_call>'
    answer = f"{EXAMPLE_NAME}'s locker code is {EXAMPLE_CODE}."
    no_time = Timing(start_time=0.0, end_time=0.0)
    return [
        TaskStep(task=question(EXAMPLE_NAME)),
        ActionStep(step_number=1, timing=no_time, model_output=line, tool_calls=[call], observations=answer),
        ActionStep(step_number=2, timing=no_time, model_output=answer, action_output=answer, is_final_answer=True),
    ]


@tool
def lookup(name: str) -> str:
    """The locker code of a person.

    Args:
        name: the person's first name
    """
    return _lookup_agent.lookup(name)


def make_agent(base_url: str, api_key: str, model: str = "policy", **model_kwargs: Any) -> ToolCallingAgent:
    """A silent ``ToolCallingAgent`` with ``lookup``, the short prompts and the worked example in its memory (run it
    with ``reset=False`` to keep it), talking to the OpenAI server at ``base_url`` (``model_kwargs`` go to
    ``OpenAIServerModel``, e.g. ``temperature=0``). smolagents asks for
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
    agent = ToolCallingAgent(
        tools=[lookup], model=llm, prompt_templates=PROMPTS, max_steps=MAX_STEPS, verbosity_level=LogLevel.OFF
    )
    agent.memory.steps.extend(example_steps())  # kept by ``agent.run(task, reset=False)``
    return agent


def lookup_calls(agent: ToolCallingAgent) -> int:
    """The well-formed ``lookup`` calls the model made (a call with a non-empty string ``name``): the agent's memory
    after the worked example."""
    calls = 0
    for step in agent.memory.steps[len(example_steps()) :]:
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
    answer = agent.run(task["messages"][-1]["content"], reset=False)
    return score(answer, lookup_calls(agent), int(task["extra_info"]["answer"]))


def held_out_probe(base_url: str, api_key: str, model: str, samples: int, **model_kwargs: Any) -> dict[str, float]:
    """Run the agent ``samples`` times on each held-out question of ``make_lookup_data.py`` (36), 16 at a time, against
    the server at ``base_url``: the mean reward, well-formed lookup calls per trajectory, and the share of
    trajectories with a reward above 0 (what GRPO needs some of in a group before it can learn)."""
    from concurrent.futures import ThreadPoolExecutor

    data_spec = importlib.util.spec_from_file_location(
        "make_lookup_data", os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_lookup_data.py")
    )
    data = importlib.util.module_from_spec(data_spec)
    data_spec.loader.exec_module(data)
    tasks = [row for row in data.rows("test") for _ in range(samples)]

    def one(row: dict[str, Any]) -> tuple[float, int]:
        agent = make_agent(base_url, api_key, model, **model_kwargs)
        answer = agent.run(row["prompt"][-1]["content"], reset=False)
        calls = lookup_calls(agent)
        return score(answer, calls, int(row["extra_info"]["answer"])), calls

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, tasks))
    n = len(results)
    return {
        "trajectories": n,
        "reward": sum(r for r, _ in results) / n,
        "lookup_calls": sum(c for _, c in results) / n,
        "rewarded": sum(r > 0 for r, _ in results) / n,
    }


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", help="ask about one person (or --held-out)")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--model", default="policy")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--held-out", action="store_true", help="run every held-out question --samples times")
    parser.add_argument("--samples", type=int, default=1)
    args = parser.parse_args()
    kwargs = {} if args.temperature is None else {"temperature": args.temperature}
    if args.held_out:
        print(held_out_probe(args.base_url, args.api_key, args.model, args.samples, **kwargs))
    elif args.name:
        agent = make_agent(args.base_url, args.api_key, args.model, **kwargs)
        answer = agent.run(question(args.name), reset=False)
        calls = lookup_calls(agent)
        code = CODES[args.name.strip().capitalize()]
        print(answer, "| lookup calls:", calls, "| reward:", score(answer, calls, code))
    else:
        parser.error("give a NAME or --held-out")
