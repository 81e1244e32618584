"""PPOTrainer: config mapping, step/train metrics, evaluators, exporters, checkpoints, reward contracts."""

from __future__ import annotations

import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from verl import CriticModel, DataProvider, PPOTrainer
from verl.api.models import Actor
from verl.api.ppo import build_ppo_config
from verl.models.tiny import make_tiny_causal_lm
from verl.trainer.config import ConfigError

FAST = {
    "max_new_tokens": 4,
    "actor_rollout_ref.actor.dtype": "float32",
    "actor_rollout_ref.rollout.dtype": "float32",
    "critic.dtype": "float32",
}


def letter_reward(prompts: list[str], responses: list[str]) -> list[float]:
    """Text contract: 1 point per ASCII letter in the response."""
    return [float(sum(ch.isascii() and ch.isalpha() for ch in r)) for r in responses]


def ascii_fraction_reward(data, return_dict: bool = False):
    """Reward-manager contract: fraction of ASCII tokens of each response, placed at its last valid token."""
    responses, mask = data.batch["responses"], data.batch["response_mask"]
    score = ((responses < 128) * mask).sum(-1).float() / mask.sum(-1).clamp(min=1)
    tensor = torch.zeros_like(responses, dtype=torch.float32)
    tensor[torch.arange(len(score)), mask.sum(-1) - 1] = score
    return {"reward_tensor": tensor, "reward_extra_info": {}} if return_dict else tensor


def _trainer(tok, tmp_path, critic: bool = False, reward_fn=letter_reward, **config) -> PPOTrainer:
    torch.manual_seed(0)
    actor = Actor(make_tiny_causal_lm(tokenizer=tok), tok)
    critic_model = CriticModel(make_tiny_causal_lm(tokenizer=tok)) if critic else None
    cfg = {**FAST, "batch_size": 2, "trainer.default_local_dir": str(tmp_path / "out"), **config}
    return PPOTrainer(actor_model=actor, critic_model=critic_model, tokenizer=tok, config=cfg, reward_fn=reward_fn)


def test_document_keys_map_onto_main_ppo_keys():
    cfg = build_ppo_config(
        {"batch_size": 4, "rollout_batch_size": 8, "kl_coef": 0.1, "lr": 1e-6, "enable_profiling": True},
        has_critic=True,
    )
    assert cfg.algorithm.adv_estimator == "gae" and cfg.actor_rollout_ref.rollout.n == 1
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 4 and cfg.critic.ppo_mini_batch_size == 4
    assert cfg.data.train_batch_size == 8
    assert cfg.algorithm.use_kl_in_reward is True and cfg.algorithm.kl_ctrl.kl_coef == 0.1
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6
    assert cfg.trainer.enable_profiling is True and cfg.trainer.backend == "local"
    grpo = build_ppo_config({"algorithm": "grpo", "kl_coef": 0.05, "actor_rollout_ref.rollout.n": 3, "batch_size": 2})
    assert grpo.algorithm.adv_estimator == "grpo" and grpo.actor_rollout_ref.rollout.n == 3
    assert grpo.actor_rollout_ref.actor.use_kl_loss is True and grpo.actor_rollout_ref.actor.kl_loss_coef == 0.05
    assert grpo.algorithm.use_kl_in_reward is False
    # the micro-batch is fitted to the 2 prompts x 3 samples per mini-batch
    assert grpo.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 6
    assert build_ppo_config({"algorithm": "rloo"}).algorithm.adv_estimator == "rloo"


def test_bad_config_keys_are_named():
    with pytest.raises(ConfigError, match="'batchsize' is neither a document key"):
        build_ppo_config({"batchsize": 4})
    with pytest.raises(ConfigError, match="algorithm='sarsa'"):
        build_ppo_config({"algorithm": "sarsa"})
    with pytest.raises(ConfigError, match="actor_rollout_ref.rollout.nn"):
        build_ppo_config({"actor_rollout_ref.rollout.nn": 2})


def test_step_returns_loss_and_verl_metrics(byte_tokenizer, tmp_path):
    # 7 tokens per response: two responses with the same ASCII fraction (zero advantages, no update) are unlikely
    trainer = _trainer(
        byte_tokenizer, tmp_path, critic=True, reward_fn=ascii_fraction_reward, kl_coef=0.1, lr=1e-3, max_new_tokens=7
    )
    before = [p.detach().clone() for p in trainer.actor_model.parameters()]
    prompt_ids = byte_tokenizer.encode("hi", return_tensors="pt")
    out = trainer.step(torch.cat([prompt_ids, prompt_ids]))
    for key in ("actor/pg_loss", "critic/vf_loss", "critic/score/mean", "response_length/mean", "timing_s/gen"):
        assert key in out, key
    assert math.isfinite(out["loss"]) and out["loss"] == pytest.approx(out["actor/pg_loss"])
    assert out["reward"] == out["critic/score/mean"] and out["policy_loss"] == out["actor/pg_loss"]
    assert out["kl"] == out["actor/reward_kl_penalty"] and out["step"] == 1
    # the score is each response's fraction of ASCII tokens, averaged over the batch
    batch = trainer.driver.last_batch
    fractions = [
        sum(t < 128 for t in r[m.bool()].tolist()) / int(m.sum())
        for r, m in zip(batch.batch["responses"], batch.batch["response_mask"])
    ]
    assert out["reward"] == pytest.approx(sum(fractions) / len(fractions))
    assert any(not torch.equal(a.cpu(), b.detach().cpu()) for a, b in zip(before, trainer.actor_model.parameters()))
    trainer.close()


def test_train_yields_document_names_and_runs_plugins(byte_tokenizer, tmp_path):
    pq.write_table(pa.table({"prompt": ["ab", "cd", "ef", "gh", "ij", "kl"]}), str(tmp_path / "p.parquet"))
    provider = DataProvider(str(tmp_path / "p.parquet"), batch_size=2)
    trainer = _trainer(byte_tokenizer, tmp_path, num_samples=2)
    trainer.data_provider = provider

    class StepEvaluator:
        def __init__(self):
            self.calls = []

        def evaluate(self, t):
            self.calls.append(t.global_steps)
            return {"eval/step_seen": float(t.global_steps)}

    class Collect:
        def __init__(self):
            self.seen = []

        def export(self, metrics, step):
            self.seen.append((step, metrics["reward"]))

    evaluator, exporter = StepEvaluator(), Collect()
    trainer.register_evaluator(evaluator, every_n_steps=2)
    trainer.add_metrics_exporter(exporter)
    steps = list(trainer.train())
    assert len(steps) == 3
    for m in steps:
        for name in ("reward", "kl", "policy_loss", "entropy", "response_length", "loss", "step"):
            assert name in m, name
    assert evaluator.calls == [2] and steps[1]["eval/step_seen"] == 2.0
    assert [s for s, _ in exporter.seen] == [1, 2, 3]
    assert list(trainer.train(num_steps=1)) and trainer.global_steps == 4
    with pytest.raises(TypeError, match="no evaluate"):
        trainer.register_evaluator(object())
    trainer.close()


def test_save_checkpoint_flags_and_namespace(byte_tokenizer, tmp_path):
    trainer = _trainer(byte_tokenizer, tmp_path, num_samples=2)
    trainer.step(["ab", "cd"])
    full = trainer.save_checkpoint(str(tmp_path / "full"))
    assert os.path.isfile(os.path.join(full, "actor", "optim_world_size_1_rank_0.safetensors"))
    assert os.path.isfile(os.path.join(full, "data.pt"))
    assert os.path.isfile(os.path.join(full, "actor", "model_world_size_1_rank_0.safetensors"))
    lean = trainer.save_checkpoint(str(tmp_path / "lean"), save_optimizer=False, save_training_state=False)
    assert not os.path.exists(os.path.join(lean, "actor", "optim_world_size_1_rank_0.safetensors"))
    assert not os.path.exists(os.path.join(lean, "data.pt"))
    assert os.path.isfile(os.path.join(lean, "actor", "model_world_size_1_rank_0.safetensors"))
    # export: the trained weights load back with transformers
    from transformers import AutoModelForCausalLM

    trainer.actor_model.save_pretrained(str(tmp_path / "export"))
    trainer.actor_tokenizer.save_pretrained(str(tmp_path / "export"))
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "export"))
    torch.testing.assert_close(
        reloaded.model.embed_tokens.weight, trainer.actor_model.hf_model.model.embed_tokens.weight.cpu()
    )
    trainer.close()
    ns = _trainer(byte_tokenizer, tmp_path, num_samples=2)
    ns_trainer = PPOTrainer(
        actor_model=ns.actor_model,
        tokenizer=byte_tokenizer,
        namespace="search-rl",
        config={**FAST, "batch_size": 2, "num_samples": 2},
        reward_fn="length",
    )
    path = ns_trainer.save_checkpoint(str(tmp_path / "ckpt"), save_optimizer=False)
    assert path == os.path.join(str(tmp_path / "ckpt"), "search-rl")
    assert ns_trainer.checkpoint_dir.endswith(os.path.join("verl_api", "search-rl"))
    ns.close()
    ns_trainer.close()


def test_verl_sample_contract_and_security_switch(byte_tokenizer, tmp_path):
    calls = []

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        calls.append((data_source, ground_truth))
        return float(len(solution_str))

    torch.manual_seed(0)
    trainer = PPOTrainer(
        actor_model=make_tiny_causal_lm(tokenizer=byte_tokenizer),
        tokenizer=byte_tokenizer,
        reward_fn=compute_score,
        config={**FAST, "batch_size": 2, "num_samples": 2, "trainer.default_local_dir": str(tmp_path / "o")},
    )
    from verl.utils.security import get_security_policy

    assert get_security_policy().allow_unsafe_operations is False
    out = trainer.step({"prompt": ["ab", "cd"], "ground_truth": ["1", "2"]})
    assert calls and calls[0] == ("api", "1") and math.isfinite(out["loss"])
    trainer.close()
