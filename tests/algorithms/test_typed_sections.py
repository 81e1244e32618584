"""The algorithms read their hyper-parameters from the typed sections: a partial section (a dict, a DictConfig,
``None``) is completed from the dataclass, the one home of each default, and what a user sets is what runs."""

from __future__ import annotations

import inspect

import pytest
import torch
from omegaconf import OmegaConf

from verl.algorithms import kl, pf_ppo, policy_loss, rollout_correction
from verl.algorithms.config import AlgorithmConfig, KLControlConfig, PFPPOConfig, RolloutCorrectionConfig
from verl.algorithms.registry import resolve_param
from verl.sections.actor import ActorConfig, PolicyLossConfig


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(4, 6, generator=g) * 0.1
    return {
        "old_log_prob": old,
        "log_prob": old + torch.randn(4, 6, generator=g) * 0.5,
        "advantages": torch.randn(4, 6, generator=g),
        "response_mask": torch.ones(4, 6),
    }


@pytest.mark.parametrize("partial", [None, {}, OmegaConf.create({})])
def test_clip_params_of_a_partial_section_are_actor_config_defaults(partial) -> None:
    params = policy_loss._clip_params(partial)
    defaults = ActorConfig()
    assert (params.low, params.high, params.dual_c) == (defaults.clip_ratio, defaults.clip_ratio, defaults.clip_ratio_c)


def test_a_set_value_is_what_the_loss_uses() -> None:
    params = policy_loss._clip_params({"clip_ratio": 0.1, "clip_ratio_high": 0.28, "clip_ratio_c": 10.0})
    assert (params.low, params.high, params.dual_c) == (0.1, 0.28, 10.0)
    nested = policy_loss.actor_config({"policy_loss": {"clip_cov_ratio": 0.5}}).policy_loss
    assert nested.clip_cov_ratio == 0.5 and nested.clip_cov_lb == PolicyLossConfig().clip_cov_lb


def test_the_legacy_entry_point_defaults_to_actor_config() -> None:
    b = _batch()
    legacy, clipfrac, _, _ = policy_loss.compute_policy_loss(**b)
    typed, metrics = policy_loss.compute_policy_loss_vanilla(**b, config=ActorConfig())
    assert torch.equal(legacy, typed) and torch.equal(clipfrac, metrics["actor/pg_clipfrac"])
    # a non-default value given to the legacy keywords changes the loss
    other, _, _, _ = policy_loss.compute_policy_loss(**b, cliprange=0.01)
    assert not torch.equal(other, legacy)


def test_kl_cov_reads_policy_loss_section() -> None:
    b = _batch(1)
    base, _ = policy_loss.compute_policy_loss_kl_cov(**b, config=None)
    same, _ = policy_loss.compute_policy_loss_kl_cov(**b, config={"policy_loss": {}})
    more, _ = policy_loss.compute_policy_loss_kl_cov(**b, config={"policy_loss": {"ppo_kl_coef": 5.0}})
    assert torch.equal(base, same) and not torch.equal(base, more)


def test_kl_controller_completes_its_section_from_kl_control_config() -> None:
    ctrl = kl.get_kl_controller({"type": "adaptive"})
    defaults = KLControlConfig()
    assert (ctrl.value, ctrl.target, ctrl.horizon) == (defaults.kl_coef, defaults.target_kl, defaults.horizon)
    assert kl.get_kl_controller(None).value == defaults.kl_coef


def test_estimator_parameters_default_to_algorithm_config() -> None:
    defaults = AlgorithmConfig()
    assert resolve_param("gamma", None, None) == defaults.gamma
    assert resolve_param("norm_adv_by_std_in_grpo", None, {}) == defaults.norm_adv_by_std_in_grpo
    assert resolve_param("lam", None, {"lam": 0.5}) == 0.5
    assert resolve_param("lam", 0.25, {"lam": 0.5}) == 0.25


def test_signature_defaults_are_the_dataclass_fields() -> None:
    pf = inspect.signature(pf_ppo.compute_pf_ppo_reweight_data).parameters
    assert pf["weight_pow"].default == PFPPOConfig().weight_pow
    assert pf["reweight_method"].default == PFPPOConfig().reweight_method
    rc = inspect.signature(rollout_correction.compute_rollout_correction).parameters
    assert rc["rollout_is_threshold"].default == RolloutCorrectionConfig().rollout_is_threshold
