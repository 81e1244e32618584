"""RolloutManager (generation + scoring over the driver's engines) and vLLMActor (skipped without vLLM + GPU)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from verl import PPOTrainer
from verl.models.tiny import make_tiny_causal_lm


def _first_a_reward(prompts: list[str], responses: list[str]) -> list[float]:
    return [float(len(p)) for p in prompts]


def test_rollout_manager_generates_groups_and_scores(byte_tokenizer, tmp_path):
    torch.manual_seed(0)
    trainer = PPOTrainer(
        actor_model=make_tiny_causal_lm(tokenizer=byte_tokenizer),
        tokenizer=byte_tokenizer,
        reward_fn=_first_a_reward,
        config={
            "batch_size": 2,
            "num_samples": 3,
            "max_new_tokens": 5,
            "data.apply_chat_template": False,
            "actor_rollout_ref.rollout.dtype": "float32",
            "trainer.default_local_dir": str(tmp_path),
        },
    )
    manager = trainer.rollout_manager
    prompts = trainer.make_batch(["a", "bcd"])
    out = manager.generate(prompts)
    assert out.batch["responses"].shape == (6, 5)
    assert out.batch["input_ids"].shape == (6, 3 + 5)
    uids = list(out.non_tensor_batch["uid"])
    assert uids[0] == uids[1] == uids[2] != uids[3] == uids[4] == uids[5]
    # prompts are repeated in a row, interleaved per prompt
    assert torch.equal(out.batch["prompts"][0], out.batch["prompts"][2])
    scored = manager.score(out)
    scores = scored.batch["token_level_scores"]
    last = scored.batch["response_mask"].sum(-1) - 1
    assert scores.sum(-1).tolist() == [1.0] * 3 + [3.0] * 3  # len("a"), len("bcd")
    assert scores[torch.arange(6), last].tolist() == [1.0] * 3 + [3.0] * 3
    trainer.close()


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the vllm extra")
def test_vllm_actor_wraps_existing_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine lives in this process
    from vllm import LLM

    from verl import vLLMActor
    from verl.models.tiny import TinyModelSpec, make_tiny_model_dir

    # vLLM's CPU attention needs a head dim of at least 32
    spec = TinyModelSpec(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, intermediate_size=256)
    model_dir = make_tiny_model_dir(str(tmp_path / "model"), spec=spec)
    engine_kwargs = {"gpu_memory_utilization": 0.2} if torch.cuda.is_available() else {"kv_cache_memory_bytes": 1 << 28}
    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=64, **engine_kwargs)
    actor = vLLMActor(llm)
    trainer = PPOTrainer(
        actor_model=actor,
        reward_fn="length",
        config={"batch_size": 2, "num_samples": 2, "max_new_tokens": 4, "trainer.default_local_dir": str(tmp_path)},
    )
    try:
        out = trainer.step(["ab", "cd"])
        assert trainer.config.actor_rollout_ref.rollout.name == "vllm"
        assert "actor/pg_loss" in out
    finally:
        trainer.close()
        from verl.workers.rollout.vllm_rollout import vLLMRollout

        vLLMRollout.from_engine(llm, trainer.config.actor_rollout_ref.rollout).shutdown()
