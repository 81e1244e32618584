"""The tool agent loop on a scripted model: tokens and masks checked token by token, malformed calls, parallel
slow tools, limits, interactions and the tokenization sanity check."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import torch

from verl.experimental.agent_loop.chat import encode_appended
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

CALC = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*34"}}</tool_call>'


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.fixture
def calc_config(tmp_path) -> str:
    return _write(
        tmp_path / "tools.yaml",
        "tools:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n    config:\n      type: native\n",
    )


def _valid(out, i: int) -> tuple[list[int], list[int]]:
    n = int(out.batch["attention_mask"][i, -out.batch["responses"].shape[1] :].sum())
    return out.batch["responses"][i, :n].tolist(), out.batch["response_mask"][i, :n].tolist()


def test_tool_call_tokens_and_masks_token_by_token(tok, kit, calc_config) -> None:
    engine = kit.ScriptedEngine(tok, {"Q1": [CALC, "The answer is 408"]})
    batch = kit.prompt_batch(tok, ["Q1: what is 12*34?"])
    out = kit.run(tok, engine, kit.rollout_config(tool_config_path=calc_config, prompt_length=1024), batch)

    eos = tok.eos_token_id
    turn1 = tok.encode(CALC, add_special_tokens=False) + [eos]
    tool = tok.encode("<|tool|>408\n<|assistant|>", add_special_tokens=False)
    turn2 = tok.encode("The answer is 408", add_special_tokens=False) + [eos]
    assert encode_appended(tok, [{"role": "tool", "content": "408"}]) == tool
    ids, mask = _valid(out, 0)
    assert ids == turn1 + tool + turn2
    assert mask == [1] * len(turn1) + [0] * len(tool) + [1] * len(turn2)
    # the prompt is the chat template with the tool schema, left-padded; positions count the valid tokens
    prompt = tok.decode(out.batch["prompts"][0][out.batch["attention_mask"][0, :1024].bool()].tolist())
    assert prompt.startswith('<|system|>[{"type": "function", "function": {"name": "calculator"')
    assert prompt.endswith("<|user|>Q1: what is 12*34?\n<|assistant|>")
    total = int(out.batch["attention_mask"][0].sum())
    assert out.batch["position_ids"][0, -out.batch["responses"].shape[1] :][len(ids) - 1] == total - 1
    assert torch.equal(out.batch["input_ids"], torch.cat([out.batch["prompts"], out.batch["responses"]], -1))
    metrics = out.non_tensor_batch["agent_metrics"][0]
    assert metrics["tool_calls"] == {"calculator": 1}
    assert (metrics["assistant_turns"], metrics["tool_errors"], metrics["parse_errors"]) == (2, 0, 0)
    assert metrics["sanity_mismatch"] is False and metrics["truncated"] is False


def test_malformed_and_unknown_calls_become_error_messages(tok, kit, calc_config) -> None:
    script = [
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"name": "weather", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>',
        "done",
    ]
    engine = kit.ScriptedEngine(tok, {"Q2": script})
    out = kit.run(tok, engine, kit.rollout_config(tool_config_path=calc_config), kit.prompt_batch(tok, ["Q2"]))
    ids, mask = _valid(out, 0)
    tool_text = tok.decode([t for t, m in zip(ids, mask) if m == 0])
    assert "Error: tool call is not valid JSON" in tool_text
    assert "Error: unknown tool 'weather'; available tools: ['calculator']" in tool_text
    assert "Error: division by zero" in tool_text
    metrics = out.non_tensor_batch["agent_metrics"][0]
    assert metrics["parse_errors"] == 1 and metrics["tool_errors"] == 2
    assert metrics["tool_calls"] == {"weather": 1, "calculator": 1}
    assert metrics["assistant_turns"] == 4


class SlowTool(BaseTool):
    """Sleeps ``config.delay_s`` without blocking the event loop, then echoes; reward 0.5 per call."""

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {"name": "slow"}})

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        await asyncio.sleep(float(self.config["delay_s"]))
        return ToolResponse(text=f"slept {parameters.get('k')}"), 0.5, {}


def test_slow_tools_run_in_parallel_bounded_by_the_slowest(tok, kit, tmp_path) -> None:
    path = _write(
        tmp_path / "slow.yaml",
        f"tools:\n  - class_name: {__name__}.SlowTool\n    config: {{type: native, delay_s: 0.5}}\n",
    )
    two_calls = "".join(f'<tool_call>{{"name": "slow", "arguments": {{"k": {k}}}}}</tool_call>' for k in (1, 2))
    scripts = {f"Q{i}": [two_calls, two_calls, "ok"] for i in range(6)}
    engine = kit.ScriptedEngine(tok, scripts)
    config = kit.rollout_config(tool_config_path=path, max_parallel_calls=2, agent_num_workers=2)
    start = time.perf_counter()
    out = kit.run(tok, engine, config, kit.prompt_batch(tok, [f"Q{i}" for i in range(6)]))
    elapsed = time.perf_counter() - start
    # 6 samples x 2 turns x 2 calls x 0.5 s = 6 s in sequence, 2 s with the calls of a turn in sequence; in
    # parallel about 2 turns x 0.5 s
    assert elapsed < 1.7, elapsed
    # 18 requests in batches: 6 calls when every turn's requests meet; on a loaded machine a late trajectory makes a
    # batch of its own (7 seen in a full run), so the bound only rules out one call per request
    assert sum(engine.batch_sizes) == 18 and len(engine.batch_sizes) <= 9, engine.batch_sizes
    assert max(engine.batch_sizes) >= 3
    metrics = out.non_tensor_batch["agent_metrics"]
    assert all(m["tool_calls"] == {"slow": 4} for m in metrics)
    assert all(0.95 < m["tool_s"] < 1.5 for m in metrics), [m["tool_s"] for m in metrics]  # 2 turns x 0.5 s
    assert [float(r) for r in out.non_tensor_batch["agent_reward"]] == [2.0] * 6


def test_max_parallel_calls_and_turn_limits(tok, kit, tmp_path) -> None:
    path = _write(
        tmp_path / "slow.yaml",
        f"tools:\n  - class_name: {__name__}.SlowTool\n    config: {{type: native, delay_s: 0.0}}\n",
    )
    three = "".join(f'<tool_call>{{"name": "slow", "arguments": {{"k": {k}}}}}</tool_call>' for k in range(3))
    engine = kit.ScriptedEngine(tok, {"Q1": [three] * 5})
    config = kit.rollout_config(tool_config_path=path, max_parallel_calls=2, max_assistant_turns=2)
    out = kit.run(tok, engine, config, kit.prompt_batch(tok, ["Q1"]))
    metrics = out.non_tensor_batch["agent_metrics"][0]
    assert metrics["assistant_turns"] == 2 and metrics["tool_calls"] == {"slow": 2}
    assert metrics["tool_errors"] == 1  # the third call of turn 1 is answered with an error, not run
    ids, mask = _valid(out, 0)
    assert "not run: at most 2 tool calls per turn" in tok.decode([t for t, m in zip(ids, mask) if m == 0])
    assert mask[-1] == 1  # it ended on the second assistant turn (its calls are not run)


def test_response_length_limit_truncates_the_conversation(tok, kit, calc_config) -> None:
    engine = kit.ScriptedEngine(tok, {"Q1": [CALC, "x" * 100]})
    config = kit.rollout_config(tool_config_path=calc_config, response_length=len(CALC) + 10)
    out = kit.run(tok, engine, config, kit.prompt_batch(tok, ["Q1"]))
    ids, mask = _valid(out, 0)
    assert len(ids) == len(CALC) + 10 and out.batch["responses"].shape[1] == len(CALC) + 10
    assert out.non_tensor_batch["agent_metrics"][0]["truncated"] is True
    assert mask[: len(CALC) + 1] == [1] * (len(CALC) + 1)


def test_tool_response_truncated_to_max_length(tok, kit, calc_config) -> None:
    big = '<tool_call>{"name": "calculator", "arguments": {"expression": "7**300"}}</tool_call>'
    engine = kit.ScriptedEngine(tok, {"Q1": [big, "ok"]})
    config = kit.rollout_config(
        tool_config_path=calc_config, max_tool_response_length=20, tool_response_truncate_side="right"
    )
    out = kit.run(tok, engine, config, kit.prompt_batch(tok, ["Q1"]))
    ids, mask = _valid(out, 0)
    shown = tok.decode([t for t, m in zip(ids, mask) if m == 0])
    assert shown == f"<|tool|>{str(7**300)[:20]}...(truncated)\n<|assistant|>"
    assert out.non_tensor_batch["agent_metrics"][0]["tool_responses_cut"] == 1


@pytest.mark.parametrize(
    ("template", "mode", "mismatch"),
    [
        ("STRICT_TEMPLATE", "strict", False),
        ("NEWLINE_TEMPLATE", "strict", True),
        ("NEWLINE_TEMPLATE", "ignore_strippable", False),
        ("NEWLINE_TEMPLATE", "disable", False),
    ],
)
def test_tokenization_sanity_check_modes(kit, calc_config, template, mode, mismatch) -> None:
    tok = kit.chat_tokenizer(getattr(kit, template))
    engine = kit.ScriptedEngine(tok, {"Q1": [CALC, "408"]})
    config = kit.rollout_config(tool_config_path=calc_config, tokenization_sanity_check_mode=mode)
    out = kit.run(tok, engine, config, kit.prompt_batch(tok, ["Q1"]))
    assert out.non_tensor_batch["agent_metrics"][0]["sanity_mismatch"] is mismatch


def test_gsm8k_interaction_gives_feedback_until_correct(tok, kit, tmp_path) -> None:
    path = _write(
        tmp_path / "interaction.yaml",
        'interaction:\n  - name: "gsm8k"\n    class_name: "verl.interactions.gsm8k_interaction.Gsm8kInteraction"\n'
        "    config: {}\n",
    )
    engine = kit.ScriptedEngine(tok, {"Q1": ["#### 5", "#### 7"], "Q2": ["#### 1", "#### 2", "#### 3"]})
    infos = [
        {"interaction_kwargs": {"name": "gsm8k", "ground_truth": "7"}},
        {"interaction_kwargs": {"name": "gsm8k", "ground_truth": "9"}},
    ]
    config = kit.rollout_config(interaction_config_path=path, max_user_turns=2)
    out = kit.run(tok, engine, config, kit.prompt_batch(tok, ["Q1", "Q2"], infos))
    m0, m1 = out.non_tensor_batch["agent_metrics"]
    assert (m0["assistant_turns"], m0["user_turns"]) == (2, 2)
    assert float(out.non_tensor_batch["agent_reward"][0]) == 1.0
    ids, mask = _valid(out, 0)
    feedback = tok.encode(
        "<|user|>Your response is incorrect! You need to reflect on your answer and try again.\n<|assistant|>",
        add_special_tokens=False,
    )
    first = tok.encode("#### 5", add_special_tokens=False) + [tok.eos_token_id]
    assert ids[: len(first) + len(feedback)] == first + feedback
    assert mask[: len(first) + len(feedback)] == [1] * len(first) + [0] * len(feedback)
    # Q2 never gets it right: stopped after max_user_turns=2 replies, third turn unanswered
    assert (m1["assistant_turns"], m1["user_turns"]) == (3, 2) and float(out.non_tensor_batch["agent_reward"][1]) == 0


def test_single_turn_agent_is_one_generation_of_the_row_prompt(tok, kit) -> None:
    engine = kit.ScriptedEngine(tok, {"Q1": ["hello"], "Q2": ["bye"]})
    batch = kit.prompt_batch(tok, ["Q1", "Q2 longer"])
    config = kit.rollout_config(agent_default_agent_loop="single_turn_agent", response_length=16)
    out = kit.run(tok, engine, config, batch)
    assert engine.batch_sizes == [2]
    assert _valid(out, 0)[0] == tok.encode("hello", add_special_tokens=False) + [tok.eos_token_id]
    assert torch.equal(out.batch["prompts"][:, -batch.batch["input_ids"].shape[1] :], batch.batch["input_ids"])
    batch.meta_info["response_length"] = 3  # a call's own length wins over the config's, as for plain engines
    short = kit.run(tok, engine, config, batch)
    assert short.batch["responses"].shape == (2, 3) and _valid(short, 0)[0] == tok.encode("hel")


def test_agent_name_column_and_user_registered_loop(tok, kit, tmp_path) -> None:
    import numpy as np

    loops = _write(tmp_path / "loops.yaml", f"- name: echo_agent\n  _target_: {__name__}.EchoAgentLoop\n")
    engine = kit.ScriptedEngine(tok, {"Q1": ["x"], "Q2": ["y"]})
    batch = kit.prompt_batch(tok, ["Q1", "Q2"])
    batch.non_tensor_batch["agent_name"] = np.array(["echo_agent", "single_turn_agent"], dtype=object)
    config = kit.rollout_config(agent_agent_loop_config_path=loops, response_length=8)
    out = kit.run(tok, engine, config, batch)
    assert _valid(out, 0)[0] == [65, 66]  # the echo loop's own tokens, no generation
    assert engine.batch_sizes == [1]


from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput  # noqa: E402


class EchoAgentLoop(AgentLoopBase):
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        return AgentLoopOutput(prompt_ids=kwargs["prompt_ids"], response_ids=[65, 66], response_mask=[1, 1])


def test_the_loops_render_with_the_data_sections_chat_template_kwargs(byte_tokenizer) -> None:
    """data.apply_chat_template_kwargs reaches every rendering of the agent loops (prompt, appended turns, the
    sanity check) through AgentLoopSettings, from the run's config (AgentLoopManager.from_config)."""
    import copy

    from omegaconf import OmegaConf

    from verl.experimental.agent_loop.chat import encode_prompt, sanity_check
    from verl.experimental.agent_loop.manager import AgentLoopManager
    from verl.trainer.config import load_config

    tok = copy.deepcopy(byte_tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
        "<nothink>{% endif %}{% endif %}"
    )
    off = {"enable_thinking": False}
    user = [{"role": "user", "content": "hi"}]
    assert tok.decode(encode_prompt(tok, user, None, off)).endswith("<|assistant|><nothink>")
    assert tok.decode(encode_prompt(tok, user, None)).endswith("<|assistant|>")
    appended = tok.decode(encode_appended(tok, [{"role": "tool", "content": "4"}], off))
    assert appended.endswith("<|assistant|><nothink>")
    turns = encode_prompt(tok, user, None, off)
    assert sanity_check(tok, turns, user, None, "strict", off) is not None  # no generation prompt in the whole chat
    cfg = load_config(["data.train_files=x.parquet", "+data.apply_chat_template_kwargs.enable_thinking=false"])
    cfg = OmegaConf.merge(cfg, {"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": True}}}})
    manager = AgentLoopManager.from_config(cfg, tok, worker_group=None)
    assert manager.runner.settings.chat_template_kwargs == off
