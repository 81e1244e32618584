"""The dataflow form runs the same worker calls as the stage-by-stage calls and as PPOTrainer.step."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from verl import PPOTrainer, RewardModel
from verl.api.dataflow import Pipeline, ppo_update
from verl.api.models import Actor
from verl.models.tiny import make_tiny_causal_lm

CONFIG = {
    "batch_size": 2,
    "num_samples": 2,
    "max_new_tokens": 4,
    "lr": 1e-3,
    "actor_rollout_ref.actor.dtype": "float32",
    "actor_rollout_ref.rollout.dtype": "float32",
}
PROMPTS = ["ab", "cd"]


def _classifier(tok) -> torch.nn.Module:
    """A tiny random sequence classifier sharing the policy's byte vocabulary."""
    cfg = LlamaConfig(
        vocab_size=259,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        num_labels=1,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(5)
    return LlamaForSequenceClassification(cfg).eval()


def _trainer(tok, tmp_path, name: str) -> PPOTrainer:
    torch.manual_seed(0)
    actor = Actor(make_tiny_causal_lm(tokenizer=tok, seed=3), tok)
    cfg = {**CONFIG, "trainer.default_local_dir": str(tmp_path / name)}
    reward = RewardModel(_classifier(tok), tokenizer=tok)
    return PPOTrainer(actor_model=actor, tokenizer=tok, config=cfg, reward_fn=reward)


def _params(trainer: PPOTrainer) -> list[torch.Tensor]:
    return [p.detach().cpu().clone() for p in trainer.actor_model.parameters()]  # CPU copies: comparable anywhere


def test_graph_equals_stage_by_stage_and_step(byte_tokenizer, tmp_path):
    graph_trainer = _trainer(byte_tokenizer, tmp_path, "graph")
    start = _params(graph_trainer)
    flow = graph_trainer.actor_model.sample() >> graph_trainer.reward_model.score() >> graph_trainer.update()
    assert isinstance(flow, Pipeline) and repr(flow) == "sample() >> score() >> update()"
    graph_metrics = flow.run(PROMPTS)

    manual = _trainer(byte_tokenizer, tmp_path, "manual")
    assert all(torch.equal(a, b) for a, b in zip(start, _params(manual)))
    batch = manual.make_batch(PROMPTS)
    manual.driver.global_steps += 1
    rollouts = manual.rollout_manager.generate(batch)
    scored = manual.rollout_manager.score(rollouts)
    manual_metrics = ppo_update(manual, scored)

    stepped = _trainer(byte_tokenizer, tmp_path, "step")
    step_metrics = stepped.step(PROMPTS)

    sampled = flow.outputs["0:sample"]
    assert torch.equal(sampled.batch["responses"], rollouts.batch["responses"])
    assert torch.equal(flow.outputs["1:score"].batch["token_level_scores"], scored.batch["token_level_scores"])
    for key in ("critic/score/mean", "actor/pg_loss", "critic/advantages/max"):
        assert graph_metrics[key] == manual_metrics[key] == step_metrics[key], key
    for a, b, c in zip(_params(graph_trainer), _params(manual), _params(stepped)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-7)
    assert any(not torch.equal(a, b) for a, b in zip(start, _params(graph_trainer)))
    assert graph_metrics["step"] == 1 and "loss" in graph_metrics
    for t in (graph_trainer, manual, stepped):
        t.close()


def test_partial_pipeline_returns_scored_batch(byte_tokenizer, tmp_path):
    trainer = _trainer(byte_tokenizer, tmp_path, "partial")
    other_reward = RewardModel(lambda p, r: [1.0] * len(r))
    scored = (trainer.actor_model.sample(temperature=0.5) >> other_reward.score()).bind(trainer).run(PROMPTS)
    assert scored.batch["responses"].shape == (4, 4)
    sums = scored.batch["token_level_scores"].sum(-1)
    assert sums.tolist() == [1.0] * 4
    assert trainer.global_steps == 0
    trainer.close()
