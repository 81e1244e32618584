"""The documents' ``kl_controller`` block: mapping onto ``algorithm.kl_ctrl``, errors, and the ``kl_coef_max`` cap."""

from __future__ import annotations

import pytest
import torch

from verl import PPOTrainer
from verl.api.models import Actor
from verl.api.ppo import build_ppo_config
from verl.models.tiny import make_tiny_causal_lm
from verl.trainer.config import ConfigError
from verl.trainer.ppo.core_algos import AdaptiveKLController, get_kl_controller

DOC_BLOCK = {"type": "adaptive", "target_kl": 0.05, "kl_coef": 0.5, "kl_coef_max": 1.0}


def test_document_block_maps_onto_kl_ctrl():
    cfg = build_ppo_config({"kl_controller": DOC_BLOCK})
    ctrl = cfg.algorithm.kl_ctrl
    assert (ctrl.type, ctrl.target_kl, ctrl.kl_coef, ctrl.kl_coef_max) == ("adaptive", 0.05, 0.5, 1.0)
    # the controller acts on the KL in the reward, so the block puts it there (not in the actor loss)
    assert cfg.algorithm.use_kl_in_reward is True and cfg.actor_rollout_ref.actor.use_kl_loss is False
    built = get_kl_controller(ctrl)
    assert isinstance(built, AdaptiveKLController) and built.kl_coef_max == 1.0 and built.value == 0.5
    # a top-level kl_coef is the initial coefficient when the block has none
    cfg = build_ppo_config({"kl_coef": 0.2, "kl_controller": {"type": "fixed", "horizon": 50}})
    assert cfg.algorithm.kl_ctrl.kl_coef == 0.2 and cfg.algorithm.kl_ctrl.horizon == 50
    assert build_ppo_config({}).algorithm.kl_ctrl.kl_coef_max is None


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ({"type": "adaptive", "kl_max": 1.0}, "kl_controller.kl_max: unknown key"),
        ({"type": "pid"}, "algorithm.kl_ctrl.type"),
        ({"type": "adaptive", "kl_coef": 0.5, "kl_coef_max": 0.1}, "above algorithm.kl_ctrl.kl_coef_max=0.1"),
        ({"type": "adaptive", "kl_coef_max": -1.0}, "kl_coef_max=-1.0 must be > 0"),
        ({"type": "adaptive", "target_kl": 0.0}, "needs target_kl > 0"),
        ("adaptive", "kl_controller must be a mapping"),
    ],
)
def test_bad_blocks_are_named(block, match):
    with pytest.raises(ConfigError, match=match):
        build_ppo_config({"kl_controller": block})


def test_contradicting_kl_coef_is_refused():
    with pytest.raises(ConfigError, match="disagree"):
        build_ppo_config({"kl_coef": 0.1, "kl_controller": {"kl_coef": 0.3}})


def test_adaptive_controller_honours_the_cap():
    capped = AdaptiveKLController(init_kl_coef=0.5, target_kl=0.05, horizon=10, kl_coef_max=0.6)
    free = AdaptiveKLController(init_kl_coef=0.5, target_kl=0.05, horizon=10)
    values = []
    for _ in range(5):  # KL far above the target: e = +0.2, beta *= 1 + 0.2 * 8 / 10 each update
        capped.update(current_kl=1.0, n_steps=8)
        free.update(current_kl=1.0, n_steps=8)
        values.append(capped.value)
    assert free.value == pytest.approx(0.5 * 1.16**5)
    assert max(values) == pytest.approx(0.6) and values[-1] == pytest.approx(0.6)
    assert values[0] == pytest.approx(0.58)  # below the cap the update is the plain proportional one
    capped.update(current_kl=0.0, n_steps=8)  # KL below target: the coefficient comes down from the cap
    assert capped.value == pytest.approx(0.6 * 0.84)
    with pytest.raises(ValueError, match="kl_coef=0.7 is above kl_coef_max=0.6"):
        AdaptiveKLController(init_kl_coef=0.7, target_kl=0.05, horizon=10, kl_coef_max=0.6)


def test_trainer_runs_the_capped_adaptive_controller(byte_tokenizer, tmp_path):
    torch.manual_seed(0)
    actor = Actor(make_tiny_causal_lm(tokenizer=byte_tokenizer), byte_tokenizer)
    trainer = PPOTrainer(
        actor_model=actor,
        tokenizer=byte_tokenizer,
        # responses arrive grouped by prompt (2 each): scores 0, 1 in every group, so GRPO always moves the policy
        reward_fn=lambda prompts, responses: [float(i % 2) for i in range(len(responses))],
        config={
            "algorithm": "grpo",
            "batch_size": 2,
            "num_samples": 2,
            "max_new_tokens": 4,
            "lr": 1e-2,
            # horizon 4, 4 sequences a step: beta *= 1 +- 0.2, capped at 0.3
            "kl_controller": {"type": "adaptive", "target_kl": 1e-9, "kl_coef": 0.25, "kl_coef_max": 0.3, "horizon": 4},
            "algorithm.kl_penalty": "abs",  # |logp - logp_ref| > 0 once the policy moved: KL above the target
            "actor_rollout_ref.actor.dtype": "float32",
            "actor_rollout_ref.rollout.dtype": "float32",
            "trainer.default_local_dir": str(tmp_path),
        },
    )
    coefs = [trainer.step(["ab", "cd"])["actor/reward_kl_penalty_coeff"] for _ in range(5)]
    trainer.close()
    # step 1: policy == reference, KL 0 -> beta * 0.8; then KL > target -> beta * 1.2 each step, never above 0.3
    assert coefs == pytest.approx([0.25, 0.2, 0.24, 0.288, 0.3])
    assert trainer.driver.kl_ctrl_in_reward.kl_coef_max == 0.3
