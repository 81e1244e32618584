"""Tools and agent loops in the Python API: PPOTrainer(tools=..., agent_loop=...) runs multi-turn rollouts whose
loops see the given tool objects."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from verl import PPOTrainer
from verl.api.agents import resolve_agent_options
from verl.api.models import Actor
from verl.experimental.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.models.tiny import make_byte_tokenizer, make_tiny_causal_lm
from verl.tools.base_tool import BaseTool
from verl.tools.calculator_tool import CalculatorTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

TEMPLATE = (
    "{% if tools %}<|system|>{{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class EchoTool(BaseTool):
    """Echoes ``text``; records every call."""

    calls: list[str] = []

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {"name": "echo"}})

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        EchoTool.calls.append(parameters["text"])
        return ToolResponse(text=parameters["text"]), 0.25, {}


class CallEveryToolLoop(AgentLoopBase):
    """Calls each tool it was given once with the user's message, then generates one turn (reward: the tools')."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        reward = 0.0
        for tool in self.tools.values():
            _, step_reward, _ = await tool.execute("i", {"text": kwargs["raw_prompt"][-1]["content"]})
            reward += step_reward
        out = await self.server.generate(kwargs["prompt_ids"], self.settings.response_length)
        return AgentLoopOutput(
            prompt_ids=kwargs["prompt_ids"],
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            reward_score=reward,
            num_turns=2,
        )


def _trainer(**kwargs: Any) -> PPOTrainer:
    tok = make_byte_tokenizer()
    tok.chat_template = TEMPLATE
    torch.manual_seed(0)
    config = {
        "max_new_tokens": 4,
        "batch_size": 2,
        "actor_rollout_ref.actor.dtype": "float32",
        "actor_rollout_ref.rollout.dtype": "float32",
        "actor_rollout_ref.rollout.n": 2,
        "data.max_prompt_length": 256,
    }
    actor = Actor(make_tiny_causal_lm(tokenizer=tok), tok)
    return PPOTrainer(actor_model=actor, tokenizer=tok, config=config, reward_fn=lambda p, r: [0.0] * len(r), **kwargs)


def test_tool_objects_and_an_agent_loop_class_reach_the_rollout(tmp_path) -> None:
    EchoTool.calls = []
    trainer = _trainer(tools=[EchoTool(None, None)], agent_loop=CallEveryToolLoop)
    rollout = trainer.config.actor_rollout_ref.rollout
    assert rollout.multi_turn.enable and rollout.name == "hf"
    assert rollout.agent.default_agent_loop == "CallEveryToolLoop" and trainer.config.data.return_raw_chat
    metrics = trainer.step(["hi", [{"role": "user", "content": "yo"}]])
    # two prompts, n=2 rollouts each: the loop called the given tool once per rollout, with the row's own messages
    assert sorted(EchoTool.calls) == ["hi", "hi", "yo", "yo"]
    assert metrics["agent/num_turns/mean"] == 2.0
    assert metrics["agent/reward/mean"] == pytest.approx(0.25)


def test_resolve_agent_options() -> None:
    keys, tools = resolve_agent_options(CalculatorTool(None, None), None)
    assert keys["actor_rollout_ref.rollout.agent.default_agent_loop"] == "tool_agent" and tools[0].name == "calculator"
    assert resolve_agent_options(None, None) == ({}, [])
    with pytest.raises(ValueError, match="unknown agent loop 'nope'"):
        resolve_agent_options(None, "nope")
    with pytest.raises(TypeError, match=r"tools=...\)\[0\]: expected a verl.tools.base_tool.BaseTool"):
        resolve_agent_options(["calculator"], None)
    with pytest.raises(ValueError, match="tool names must be unique"):
        resolve_agent_options([CalculatorTool(None, None), CalculatorTool(None, None)], None)
    with pytest.raises(FileNotFoundError, match="no such tool-config file"):
        resolve_agent_options("missing.yaml", None)
