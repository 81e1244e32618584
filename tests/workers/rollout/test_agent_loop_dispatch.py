"""Agent loops as a layer over the hf engine (``AgentLoopManager`` over the engine's request server): turn
requests are batched onto the same engine; single-turn rows give the tokens plain generation gives; tool turns get
response_mask 0. The engine itself generates plainly whatever ``multi_turn.enable`` says."""

from __future__ import annotations

import torch

from verl.experimental.agent_loop.manager import AgentLoopManager
from verl.models.tiny import make_byte_tokenizer, make_tiny_causal_lm
from verl.workers.rollout.hf_rollout import HFRollout


def test_single_turn_agent_matches_plain_generation(rollout_config, make_prompts, byte_prompts) -> None:
    model, tok = make_tiny_causal_lm(seed=0), make_byte_tokenizer()
    plain = HFRollout(model, rollout_config(response_length=6, calculate_log_probs=True), tokenizer=tok)
    looped_config = rollout_config(response_length=6, calculate_log_probs=True, multi_turn={"enable": True})
    looped = HFRollout(model, looped_config, tokenizer=tok)
    prompts = make_prompts(byte_prompts, prompt_len=8, do_sample=False)
    expected = plain.generate_sequences(prompts)
    manager = AgentLoopManager(looped_config, tok, looped)
    out = manager.generate_sequences(prompts)
    assert manager.last_batch_sizes == [5]  # every trajectory's request in one engine call
    for key in ("prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids"):
        assert torch.equal(out.batch[key], expected.batch[key]), key
    torch.testing.assert_close(out.batch["rollout_log_probs"], expected.batch["rollout_log_probs"])
    assert [m["num_turns"] for m in out.non_tensor_batch["agent_metrics"]] == [2] * 5
    # the engine knows nothing of agents: its own call is a plain one
    assert "agent_metrics" not in looped.generate_sequences(prompts).non_tensor_batch


def test_tool_agent_on_the_hf_engine(rollout_config, tmp_path) -> None:
    import numpy as np

    from verl.protocol import DataProto

    tok = make_byte_tokenizer()
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n    config: {type: native}\n")
    config = rollout_config(
        response_length=24,
        prompt_length=64,
        multi_turn={"enable": True, "tool_config_path": str(tools), "max_assistant_turns": 3},
        agent={"default_agent_loop": "tool_agent"},
    )
    engine = HFRollout(make_tiny_causal_lm(seed=0), config, tokenizer=tok)
    text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)] * 2)
    raw = np.empty(2, dtype=object)
    raw[:] = [[{"role": "user", "content": "2+2?"}]] * 2
    prompts = DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
        non_tensors={"raw_prompt": raw},
        meta_info={"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "do_sample": False},
    )
    out = AgentLoopManager(config, tok, engine).generate_sequences(prompts)
    assert out.batch["responses"].shape == (2, 24) and out.batch["prompts"].shape == (2, 64)
    # greedy decoding of identical prompts: identical trajectories, generated tokens only (the random model
    # writes no tool call), and the prompt ends with the byte template's generation prompt
    assert torch.equal(out.batch["responses"][0], out.batch["responses"][1])
    valid = out.batch["attention_mask"][:, 64:]
    assert torch.equal(out.batch["response_mask"], valid)
    assert tok.decode(out.batch["prompts"][0][-len(ids[0]) :].tolist()) == text
