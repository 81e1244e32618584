"""A real agent framework, unchanged: smolagents' ``ToolCallingAgent`` (examples/any_agent/smolagents_agent.py)
runs one trajectory end to end through the rollout's endpoint, and the trained ids are the ones the engine
sampled; the smolagents lookup example (examples/any_agent/smolagents_lookup.py) scores its trajectories."""

from __future__ import annotations

import os
from typing import Any

import pytest

from verl.base_config import omega_conf_to_dataclass
from verl.experimental.agent_loop.runner import AgentLoopRunner
from verl.workers.config import RolloutConfig

pytest.importorskip("smolagents", reason="smolagents is the agents extra (in dev): pip install smolagents")

EXAMPLE = os.path.join(os.path.dirname(__file__), "../../../../examples/any_agent/smolagents_agent.py")
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*34"}}</tool_call>'
FINAL = '<tool_call>{"name": "final_answer", "arguments": {"answer": "408"}}</tool_call>'


def test_a_smolagents_tool_calling_agent_trains_on_its_sampled_ids(kit) -> None:
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": [CALL, FINAL]})
    sent: list[list[int]] = []

    def generate(prompts: Any) -> Any:
        out = engine(prompts)
        n = int(out.batch["response_mask"][0].sum())
        sent.append(out.batch["responses"][0, :n].tolist())
        return out

    config = kit.rollout_config(agent_default_agent_loop="openai_agent", prompt_length=8192, response_length=1024,
                                agent_openai={"agent": f"{os.path.abspath(EXAMPLE)}:run"})  # fmt: skip
    config = omega_conf_to_dataclass(config, RolloutConfig)
    batch = kit.prompt_batch(tok, ["Q1: what is 12*34?"], [{"answer": "408"}])
    out = AgentLoopRunner(config, tok, generate).generate_sequences(batch)

    metrics = out.non_tensor_batch["agent_metrics"][0]
    assert metrics["openai/failure_reason"] is None, metrics
    # the agent ran its calculator, then answered with final_answer: two requests, both tool calls; smolagents
    # sends its tool_choice="required" and re-writes the history as text, so the second request starts a segment
    assert (metrics["openai/requests"], metrics["openai/tool_calls"], metrics["openai/tool_choice_unmet"]) == (2, 2, 0)
    assert (metrics["openai/segments"], metrics["openai/splits"]) == (2, 1)
    # each segment is a training row (train_segments=all), the agent's own score of its final answer on both
    assert len(out) == 2 and list(out.non_tensor_batch["agent_reward"]) == [1.0, 1.0]
    # the last row is the last segment: the prompt smolagents sent (its system prompt, the tool schemas, the
    # calculator's observation), then exactly the ids the engine sampled for the final answer, all mask 1; the
    # first row is the calculator call, sampled in the first segment
    width = out.batch["responses"].shape[1]
    for row, expected in ((0, sent[0]), (1, sent[-1])):
        attn = out.batch["attention_mask"][row]
        n = int(attn[-width:].sum())
        assert out.batch["responses"][row, :n].tolist() == expected
        assert out.batch["response_mask"][row, :n].tolist() == [1] * n
    prompt = tok.decode(out.batch["prompts"][1][attn[:-width].bool()].tolist())
    assert "final_answer" in prompt and "408" in prompt and "Q1: what is 12*34?" in prompt
    assert sent[-1] == tok.encode(FINAL, add_special_tokens=False) + [tok.eos_token_id]


def test_the_lookup_example_scores_a_call_and_its_answer(kit, monkeypatch) -> None:
    """examples/any_agent/lookup_agent.py through the endpoint: a lookup call then the code is 1.0; an answer without
    a call (the example's code copied) is 0 (its few-shot turns come first, so the scripted answers start at turn 2)."""
    lookup = os.path.join(os.path.dirname(EXAMPLE), "lookup_agent.py")
    spec = f"{os.path.abspath(lookup)}:run"
    call = '<tool_call>{"name": "lookup", "arguments": {"name": "Alice"}}</tool_call>'
    from verl.experimental.agent_loop.openai_agent.agents import load_agent
    from verl.experimental.agent_loop.openai_agent.loop import _AGENTS

    agent_globals = _AGENTS.setdefault(spec, load_agent(spec)).__globals__
    monkeypatch.setitem(agent_globals, "MAX_TOKENS", 128)  # the test's byte tokenizer: one token per character
    code = agent_globals["CODES"]["Alice"]
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": ["", "", call, f"It is {code}."], "Q2": ["", "", "It is 123."]})
    config = kit.rollout_config(
        agent_default_agent_loop="openai_agent", prompt_length=1024, agent_openai={"agent": spec}
    )
    config = omega_conf_to_dataclass(config, RolloutConfig)
    questions = ["Q1: What is the locker code of Alice?", "Q2: What is the locker code of Alice?"]
    batch = kit.prompt_batch(tok, questions, [{"answer": str(code)}] * 2)
    out = AgentLoopRunner(config, tok, engine).generate_sequences(batch)
    metrics = list(out.non_tensor_batch["agent_metrics"])
    assert [m["openai/tool_calls"] for m in metrics] == [1, 0] and [m["openai/splits"] for m in metrics] == [0, 0]
    assert list(out.non_tensor_batch["agent_reward"]) == [1.0, 0.0]
    # the call, the tool's reply (mask 0) and the answer are one trained row
    mask = out.batch["response_mask"][0].tolist()
    assert sum(mask) == len(call) + 1 + len(f"It is {code}.") + 1


def test_tool_choice_required_is_parsed_as_auto_and_counted_when_unmet(kit) -> None:
    agents = os.path.join(os.path.dirname(__file__), "agents_for_tests.py")
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": [CALL, "no call this time"]})
    config = kit.rollout_config(
        agent_default_agent_loop="openai_agent", agent_openai={"agent": f"{agents}:requires_a_tool"}
    )
    config = omega_conf_to_dataclass(config, RolloutConfig)
    out = AgentLoopRunner(config, tok, engine).generate_sequences(kit.prompt_batch(tok, ["Q1: 12*34?"]))
    metrics = out.non_tensor_batch["agent_metrics"][0]
    assert metrics["openai/failure_reason"] is None, metrics
    assert (metrics["openai/tool_calls"], metrics["openai/tool_choice_unmet"]) == (1, 1)
    assert out.non_tensor_batch["agent_reward"][0] == 1.0  # the call came back as message.tool_calls


def test_the_smolagents_lookup_example_scores_its_final_answer(kit, monkeypatch) -> None:
    """examples/any_agent/smolagents_lookup.py through the endpoint, three trajectories in one batch; its worked example
    sits in the agent's memory as two assistant turns, so the scripted replies start at turn 2. One tool step
    (``max_steps=1``), then smolagents' final-answer request: Q1 looks the code up and answers it (1.0); Q2 answers in
    text with the worked example's code, which smolagents cannot parse, then again in its final-answer request (0);
    Q3 looks up but answers the wrong code (0.1, the tool use alone)."""
    spec = f"{os.path.abspath(os.path.join(os.path.dirname(EXAMPLE), 'smolagents_lookup.py'))}:run"
    from verl.experimental.agent_loop.openai_agent.agents import load_agent
    from verl.experimental.agent_loop.openai_agent.loop import _AGENTS

    agent_globals = _AGENTS.setdefault(spec, load_agent(spec)).__globals__
    monkeypatch.setitem(agent_globals, "MAX_TOKENS", 128)  # the test's byte tokenizer: one token per character
    code = agent_globals["CODES"]["Alice"]
    call = '<tool_call>{"name": "lookup", "arguments": {"name": "Alice"}}</tool_call>'
    tok = kit.chat_tokenizer()
    scripts = {"Q1": ["", "", call, f"It is {code}."], "Q2": ["", "", "It is 123.", "It is 123."]}
    scripts["Q3"] = ["", "", call, "It is 123."]
    engine = kit.ScriptedEngine(tok, scripts)
    config = kit.rollout_config(agent_default_agent_loop="openai_agent", prompt_length=2048, response_length=256,
                                agent_openai={"agent": spec})  # fmt: skip
    config = omega_conf_to_dataclass(config, RolloutConfig)
    questions = [f"Q{i}: What is the locker code of Alice?" for i in (1, 2, 3)]
    out = AgentLoopRunner(config, tok, engine).generate_sequences(
        kit.prompt_batch(tok, questions, [{"answer": str(code)}] * 3)
    )
    metrics = list(out.non_tensor_batch["agent_metrics"])[::2]  # a trajectory's rows share its metrics
    assert all(m["openai/failure_reason"] is None for m in metrics), metrics
    # two requests each, and the final-answer request (its own system prompt) starts a second segment: two rows per
    # trajectory, each holding one reply
    assert [m["openai/requests"] for m in metrics] == [2, 2, 2] and [m["openai/splits"] for m in metrics] == [1, 1, 1]
    assert list(out.non_tensor_batch["agent_reward"]) == [1.0, 1.0, 0.0, 0.0, 0.1, 0.1]
    width = out.batch["responses"].shape[1]
    for row, text in ((0, call), (1, f"It is {code}."), (2, "It is 123."), (3, "It is 123.")):
        n = int(out.batch["attention_mask"][row, -width:].sum())
        sampled = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
        assert out.batch["responses"][row, :n].tolist() == sampled
        assert out.batch["response_mask"][row, :n].tolist() == [1] * n
    # the first request: the short system prompt, then the worked example as separate turns of the agent's memory
    # (smolagents' TaskStep and ActionSteps), then the row's task
    first = tok.decode(out.batch["prompts"][0][out.batch["attention_mask"][0, :-width].bool()].tolist())
    turns = [
        "<|system|>You find locker codes with the lookup tool.",
        "<|user|>New task:\nWhat is the locker code of Bob?\n",
        '<|assistant|><tool_call>{"name": "lookup", "arguments": {"name": "Bob"}}</tool_call>\nCalling tools:',
        "<|user|>Observation:\nBob's locker code is 123.\n",
        "<|assistant|>Bob's locker code is 123.<eos>",
        "<|user|>New task:\nQ1: What is the locker code of Alice?\n",
    ]
    places = [first.find(turn) for turn in turns]
    assert -1 not in places and places == sorted(places), (places, first)
    # Q1's final-answer request shows the model smolagents' rewrite of its call and the tool's observation
    second = tok.decode(out.batch["prompts"][1][out.batch["attention_mask"][1, :-width].bool()].tolist())
    assert "Calling tools:" in second and f"Observation:\nAlice's locker code is {code}." in second
