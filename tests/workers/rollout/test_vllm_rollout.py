"""vLLMRollout: same output layout as the HF engine, greedy parity with transformers, in-place weight updates."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
from verl.protocol import DataProto
from verl.workers.rollout.hf_rollout import HFRollout

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed (pip install -e .[vllm])")

PAD = 256
# vLLM's CPU attention kernels need head_dim >= 32: 128 hidden / 2 heads = 64. Tied embeddings exercise the
# lm_head.weight skip in update_weights.
SPEC = TinyModelSpec(
    arch="qwen2", hidden_size=128, num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True
)


def test_missing_vllm_gives_an_install_hint(monkeypatch, rollout_config):
    from verl.workers.rollout.vllm_rollout import vLLMRollout

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"pip install -e \.\[vllm\]"):
        vLLMRollout("unused", rollout_config(name="vllm"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("vllm_tiny"))
    make_tiny_causal_lm(SPEC, save_dir=path, seed=0)
    return path


@pytest.fixture(scope="module")
def engine(model_dir):
    from omegaconf import OmegaConf

    from verl.workers.rollout.vllm_rollout import vLLMRollout

    cfg = OmegaConf.create(
        dict(
            name="vllm",
            temperature=1.0,
            top_p=1.0,
            top_k=-1,
            do_sample=True,
            prompt_length=8,
            response_length=6,
            min_new_tokens=0,
            dtype="float32",
            max_num_seqs=8,
            calculate_log_probs=True,
            enforce_eager=True,
            free_cache_engine=False,
            seed=0,
            val_kwargs=dict(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1),
        )
    )
    rollout = vLLMRollout(model_dir, cfg)
    yield rollout
    rollout.shutdown()  # later tests need a process without vLLM's process group


def _hf_greedy(model, rollout_config, prompts):
    cfg = rollout_config(response_length=6, do_sample=False, calculate_log_probs=True)
    return HFRollout(model, cfg).generate_sequences(prompts)


def _manual_log_probs(model, out, temperature: float) -> torch.Tensor:
    b = out.batch
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]).logits
    resp_len = b["responses"].shape[1]
    resp_logits = logits[:, -resp_len - 1 : -1, :] / temperature
    return torch.log_softmax(resp_logits, dim=-1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)


@pytest.mark.vllm
@needs_vllm
def test_greedy_layout_and_parity_with_transformers(engine, rollout_config, make_prompts, byte_prompts):
    model = make_tiny_causal_lm(SPEC, seed=0)
    prompts = make_prompts(byte_prompts, prompt_len=8, validate=True)
    out = engine.generate_sequences(prompts)
    b = out.batch
    assert b["responses"].shape == (5, 6) and b["input_ids"].shape == (5, 14)
    assert torch.equal(b["prompts"], prompts.batch["input_ids"])
    assert torch.equal(b["input_ids"][:, 8:], b["responses"])
    assert torch.equal(b["attention_mask"][:, 8:], b["response_mask"])
    assert b["position_ids"][2, 8:].tolist() == [1, 2, 3, 4, 5, 6]
    assert list(out.non_tensor_batch["uid"]) == [f"uid-{i}" for i in range(5)]
    hf = _hf_greedy(model, rollout_config, prompts)
    assert torch.equal(b["responses"], hf.batch["responses"])
    # greedy: log-probs under the unscaled logits
    expected = _manual_log_probs(model, out, 1.0)
    mask = b["response_mask"].bool()
    assert torch.allclose(b["rollout_log_probs"][mask], expected[mask], atol=1e-3)


@pytest.mark.vllm
@needs_vllm
def test_sampled_log_probs_follow_the_temperature(engine, make_prompts, byte_prompts):
    model = make_tiny_causal_lm(SPEC, seed=0)
    out = engine.generate_sequences(make_prompts(byte_prompts, prompt_len=8, temperature=0.7))
    expected = _manual_log_probs(model, out, 0.7)
    mask = out.batch["response_mask"].bool()
    assert torch.allclose(out.batch["rollout_log_probs"][mask], expected[mask], atol=1e-3)


@pytest.mark.vllm
@needs_vllm
def test_a_seeded_call_samples_alike_whatever_drew_from_the_generator_before(engine, make_prompts, byte_prompts):
    """The in-process CPU sampler draws from the global torch generator; a call with ``meta_info["seed"]`` seeds it,
    so what else in the process drew random numbers before (an MFU probe, a user's code) does not change its
    samples, and a different seed does."""
    first = engine.generate_sequences(make_prompts(byte_prompts, prompt_len=8, seed=7))
    torch.rand(12345)  # the rest of the process draws a varying amount in between
    again = engine.generate_sequences(make_prompts(byte_prompts, prompt_len=8, seed=7))
    other = engine.generate_sequences(make_prompts(byte_prompts, prompt_len=8, seed=8))
    assert torch.equal(first.batch["responses"], again.batch["responses"])
    assert not torch.equal(first.batch["responses"], other.batch["responses"])


@pytest.mark.vllm
@needs_vllm
def test_stops_at_the_callers_eos_and_masks_after_it(engine, make_prompts, byte_prompts):
    free = engine.generate_sequences(make_prompts(byte_prompts, prompt_len=8, validate=True))
    rows = free.batch["responses"].tolist()
    eos = rows[0][2]
    out = engine.generate_sequences(
        make_prompts(byte_prompts, prompt_len=8, validate=True, eos_token_id=eos, pad_token_id=PAD)
    )
    for i, row in enumerate(rows):
        n_valid = row.index(eos) + 1 if eos in row else 6
        assert out.batch["responses"][i].tolist() == row[:n_valid] + [PAD] * (6 - n_valid), i
        assert out.batch["response_mask"][i].tolist() == [1] * n_valid + [0] * (6 - n_valid), i


@pytest.mark.vllm
@needs_vllm
def test_update_weights_without_restart(engine, rollout_config, make_prompts, byte_prompts):
    old, new = make_tiny_causal_lm(SPEC, seed=0), make_tiny_causal_lm(SPEC, seed=1)
    prompts = make_prompts(byte_prompts, prompt_len=8, validate=True)
    old_greedy = _hf_greedy(old, rollout_config, prompts).batch["responses"]
    new_greedy = _hf_greedy(new, rollout_config, prompts).batch["responses"]
    assert not torch.equal(old_greedy, new_greedy)  # the two weight sets are distinguishable
    llm_before = engine.llm
    engine.update_weights(iter(new.state_dict().items()))
    try:
        assert engine.llm is llm_before
        assert torch.equal(engine.generate_sequences(prompts).batch["responses"], new_greedy)
    finally:
        engine.update_weights(iter(old.state_dict().items()))
    assert torch.equal(engine.generate_sequences(prompts).batch["responses"], old_greedy)


@pytest.mark.vllm
@needs_vllm
def test_agent_loops_run_on_the_vllm_engine(engine, make_prompts, byte_prompts):
    """The driver's agent loops over the engine's request server (vLLM's continuous one): greedy single-turn loops
    give exactly the plain greedy generation (tokens and mask)."""
    import numpy as np

    prompts = make_prompts(byte_prompts, prompt_len=8, validate=True)
    plain = engine.generate_sequences(prompts)
    prompts = make_prompts(byte_prompts, prompt_len=8, validate=True)
    prompts.non_tensor_batch["agent_name"] = np.array(["single_turn_agent"] * len(byte_prompts), dtype=object)
    from omegaconf import OmegaConf

    from verl.experimental.agent_loop.manager import AgentLoopManager
    from verl.models.tiny import make_byte_tokenizer

    section = OmegaConf.merge(engine.config, {"multi_turn": {"enable": True}})
    manager = AgentLoopManager(section, make_byte_tokenizer(), engine)  # the loops tokenize turns
    looped = manager.generate_sequences(prompts)
    assert manager.last_batch_sizes and max(manager.last_batch_sizes) <= len(byte_prompts)  # engine steps
    mask = plain.batch["response_mask"].bool()
    assert torch.equal(looped.batch["response_mask"], plain.batch["response_mask"])
    assert torch.equal(looped.batch["responses"][mask], plain.batch["responses"][mask])


@pytest.mark.vllm
@needs_vllm
def test_agent_turns_join_the_running_batch_request_by_request(engine):
    """The agent loops' turn server drives vLLM's scheduler a step at a time: a short request sent while a long one
    decodes runs next to it and is answered first, each within its own token budget, and greedy turns give the
    plain engine's tokens."""
    import asyncio

    from verl.workers.rollout.vllm_request_server import VLLMRequestServer

    meta = {"validate": True, "eos_token_id": [PAD], "pad_token_id": 0}  # greedy never reaches PAD here
    server = VLLMRequestServer(engine, meta)
    long_prompt, short_prompt = [5, 6, 7, 8], [9, 10, 11]
    finished: list[str] = []

    async def turn(name: str, ids: list[int], budget: int, delay_steps: int):
        while len(server.batch_sizes) < delay_steps:  # send once the engine has run this many steps
            await asyncio.sleep(0.001)
        out = await server.generate(ids, budget)
        finished.append(name)
        return out

    async def main():
        return await asyncio.gather(turn("long", long_prompt, 6, 0), turn("short", short_prompt, 1, 2))

    try:
        long_out, short_out = asyncio.run(main())
    finally:
        server.close()
    assert finished == ["short", "long"]
    assert len(long_out.token_ids) == 6 and long_out.stop_reason == "length"
    assert len(short_out.token_ids) == 1 and len(short_out.log_probs) == 1
    assert max(server.batch_sizes) == 2  # the short request ran inside the long one's batch
    prompts = DataProto.from_dict(
        tensors={
            "input_ids": torch.tensor([long_prompt]),
            "attention_mask": torch.ones(1, 4, dtype=torch.long),
            "position_ids": torch.arange(4).unsqueeze(0),
        },
        meta_info={**meta, "response_length": 6},
    )
    plain = engine.generate_sequences(prompts)
    assert plain.batch["responses"][0].tolist() == long_out.token_ids
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(server.generate([1, 2], 1))


@pytest.mark.vllm
@needs_vllm
def test_a_group_quota_cancels_the_rest_with_their_tokens_and_log_probs(engine, make_prompts):
    from verl.workers.rollout.group_quota import generate_with_group_quota

    rows = [list(b"ab"), list(b"ab"), list(b"xyz"), list(b"xyz"), list(b"q"), list(b"q")]
    free = engine.generate_sequences(make_prompts(rows, prompt_len=8, validate=True))
    prompts = make_prompts(rows, prompt_len=8, validate=True, group_quota=2, group_size=2)
    prompts.batch["token_budget"] = torch.tensor([2, 2, 6, 6, 0, 0])  # group 2 had nothing left: it counts
    out = generate_with_group_quota(engine, prompts)
    lengths = out.batch["response_mask"].sum(-1).tolist()
    assert lengths[:2] == [2, 2] and lengths[4:] == [0, 0] and min(lengths[2:4]) >= 1
    assert out.batch["partial_interrupted"].tolist() == [False, False, True, True, False, False]
    # group 0 ended first: group 1 was cancelled after at most as many tokens, answered with them and their log-probs
    for i in (0, 1, 2, 3):
        k = lengths[i]
        assert out.batch["responses"][i, :k].tolist() == free.batch["responses"][i, :k].tolist(), i
        torch.testing.assert_close(
            out.batch["rollout_log_probs"][i, :k], free.batch["rollout_log_probs"][i, :k], atol=1e-4, rtol=0
        )
    assert out.batch["partial_finish_step"][:2].max() < out.batch["partial_finish_step"][2:4].min()
