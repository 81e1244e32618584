"""The documents' extension points: ``BaseTrainer`` (what an evaluator receives), ``verl.utils.evaluation``,
and ``BaseAlgorithm`` (a user algorithm trained through the standard driver)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl import PPOTrainer
from verl.api.models import Actor
from verl.api.ppo import build_ppo_config
from verl.models.tiny import make_tiny_causal_lm
from verl.trainer import BaseAlgorithm, BaseTrainer
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY
from verl.utils.evaluation import Evaluator

FAST = {
    "batch_size": 2,
    "num_samples": 4,
    "max_new_tokens": 4,
    "lr": 1e-2,
    "actor_rollout_ref.actor.dtype": "float32",
    "actor_rollout_ref.rollout.dtype": "float32",
}


def text_reward(prompts: list[str], responses: list[str]) -> list[float]:
    return [float(sum(map(ord, r)) % 7) for r in responses]


def _trainer(tok, tmp_path, name: str, algorithm, **extra) -> PPOTrainer:
    torch.manual_seed(0)
    actor = Actor(make_tiny_causal_lm(tokenizer=tok), tok)
    cfg = {**FAST, "algorithm": algorithm, "trainer.default_local_dir": str(tmp_path / name), **extra}
    return PPOTrainer(actor_model=actor, tokenizer=tok, config=cfg, reward_fn=text_reward)


class PlainGRPO(BaseAlgorithm):
    """No overrides: GRPO's estimator and PPO's clipped loss, under a new name."""

    name = "test_plain_grpo"


class MedianGRPO(BaseAlgorithm):
    """GRPO with the group median as the baseline (no std normalisation)."""

    name = "test_grpo_median"

    def __init__(self) -> None:
        self.loss_calls = 0

    def compute_advantage(self, token_level_rewards, response_mask, index, **kwargs):
        scores = token_level_rewards.sum(-1)
        baseline = torch.stack([scores[torch.as_tensor(index == uid)].median() for uid in index])
        adv = (scores - baseline).unsqueeze(-1) * response_mask
        return adv, adv

    def compute_policy_loss(self, old_log_prob, log_prob, advantages, response_mask, **kwargs):
        self.loss_calls += 1
        return super().compute_policy_loss(old_log_prob, log_prob, advantages, response_mask, **kwargs)


def test_subclass_without_overrides_trains_exactly_like_the_builtin(byte_tokenizer, tmp_path):
    builtin = _trainer(byte_tokenizer, tmp_path, "builtin", "grpo")
    custom = _trainer(byte_tokenizer, tmp_path, "custom", PlainGRPO)
    assert custom.config.algorithm.adv_estimator == "test_plain_grpo"
    assert custom.config.actor_rollout_ref.actor.policy_loss.loss_mode == "test_plain_grpo"
    for _ in range(2):
        a, b = builtin.step(["ab", "cd"]), custom.step(["ab", "cd"])
        for key in ("actor/pg_loss", "critic/advantages/max", "critic/score/mean"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), key
    for p, q in zip(builtin.actor_model.parameters(), custom.actor_model.parameters()):
        torch.testing.assert_close(p, q)
    builtin.close()
    custom.close()


def test_custom_baseline_and_loss_are_what_the_driver_uses(byte_tokenizer, tmp_path):
    algo = MedianGRPO()
    trainer = _trainer(byte_tokenizer, tmp_path, "median", algo)
    before = [p.detach().clone() for p in trainer.actor_model.parameters()]
    trainer.step(["ab", "cd"])
    batch = trainer.last_batch
    scores = batch.batch["token_level_rewards"].sum(-1)
    uids = batch.non_tensor_batch["uid"]
    for row in range(len(batch)):
        group = scores[torch.as_tensor(uids == uids[row])]
        want = (scores[row] - group.median()) * batch.batch["response_mask"][row]
        torch.testing.assert_close(batch.batch["advantages"][row], want)
    assert algo.loss_calls > 0  # the workers' update called the subclass's loss
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.actor_model.parameters()))
    trainer.close()


def test_algorithm_registration_rules():
    assert MedianGRPO.registry_name() == "test_grpo_median"

    class MyFancyAlgo(BaseAlgorithm):
        pass

    assert MyFancyAlgo.registry_name() == "my_fancy_algo"
    cfg = build_ppo_config({"algorithm": MyFancyAlgo(), "num_samples": 2})
    assert cfg.algorithm.adv_estimator == "my_fancy_algo" and "my_fancy_algo" in ADV_ESTIMATOR_REGISTRY
    assert "my_fancy_algo" in POLICY_LOSS_REGISTRY

    class Impostor(BaseAlgorithm):
        name = "my_fancy_algo"

        def compute_advantage(self, token_level_rewards, response_mask, index=None, **kwargs):
            return token_level_rewards, token_level_rewards

    with pytest.raises(ValueError, match="already been registered"):
        Impostor().register()
    with pytest.raises(Exception, match="BaseAlgorithm subclass"):
        build_ppo_config({"algorithm": "not_an_algorithm"})


def test_document_evaluator_receives_a_base_trainer(byte_tokenizer, tmp_path):
    """The custom evaluator of document 002 (section 3.2), as written there."""

    class CustomEvaluator(Evaluator):
        def __init__(self, eval_dataloader):
            self.eval_dataloader = eval_dataloader
            self.seen: list[BaseTrainer] = []

        def evaluate(self, trainer: BaseTrainer):
            self.seen.append(trainer)
            total_reward = 0.0
            count = 0
            for batch in self.eval_dataloader:
                with torch.no_grad():
                    output = trainer.actor_model.generate(batch["input_ids"], max_new_tokens=3, do_sample=False)
                reward = trainer.reward_model(output)
                total_reward += reward.mean().item()
                count += 1
            return {"avg_reward": total_reward / count}

    trainer = _trainer(byte_tokenizer, tmp_path, "eval", "grpo")
    ids = torch.tensor([byte_tokenizer.encode("hi"), byte_tokenizer.encode("yo")])
    evaluator = CustomEvaluator([{"input_ids": ids}])
    trainer.register_evaluator(evaluator)
    metrics = trainer.step(["ab", "cd"])
    assert isinstance(evaluator.seen[0], BaseTrainer) and evaluator.seen[0] is trainer
    # the evaluator's number is the reward function on the greedy continuations, computed independently here
    with torch.no_grad():
        out = trainer.actor_model.generate(ids, max_new_tokens=3, do_sample=False)
    texts = [byte_tokenizer.decode(row.tolist(), skip_special_tokens=True) for row in out]
    assert metrics["avg_reward"] == pytest.approx(float(np.mean(text_reward([], texts))))
    assert trainer.tokenizer is byte_tokenizer and trainer.history[-1]["avg_reward"] == metrics["avg_reward"]
    trainer.close()
    with pytest.raises(TypeError, match="abstract"):
        BaseTrainer()
