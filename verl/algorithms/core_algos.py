"""Core RL algorithms of verl: advantage estimators, policy losses, KL penalties and loss aggregation.

Pure tensor functions (no model, no worker). Extend them by registering your own function by name::

    from verl.trainer.ppo.core_algos import register_adv_est, register_policy_loss  # or verl.algorithms.core_algos

    @register_adv_est("my_estimator")          # algorithm.adv_estimator=my_estimator
    def my_estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs): ...

    @register_policy_loss("my_loss")           # actor_rollout_ref.actor.policy_loss.loss_mode=my_loss
    def my_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                config=None, rollout_is_weights=None): ...

See ``docs/algorithms.md`` for the formulas and ``verl/algorithms/advantage.py`` for the keyword
arguments the driver passes to every estimator.
"""

from __future__ import annotations

from verl.algorithms.advantage import (
    compute_gae_advantage_return,
    compute_gpg_outcome_advantage,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_grpo_vectorized_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
    group_ids_to_tensor,
)
from verl.algorithms.advantage_gdpo import compute_gdpo_outcome_advantage
from verl.algorithms.advantage_otb import (
    compute_multi_turn_optimal_token_baseline_advantage,
    compute_optimal_token_baseline_advantage,
)
from verl.algorithms.flowrl import compute_policy_loss_flowrl
from verl.algorithms.kl import (
    KL_PENALTY_TYPES,
    AdaptiveKLController,
    FixedKLController,
    compute_rewards,
    get_kl_controller,
    kl_penalty,
    kl_penalty_forward,
)
from verl.algorithms.losses import LOSS_AGG_MODES, agg_loss, compute_entropy_loss, compute_value_loss
from verl.algorithms.online_dpo import compute_policy_loss_online_dpo
from verl.algorithms.pf_ppo import compute_pf_ppo_reweight_data
from verl.algorithms.policy_loss import (
    compute_policy_loss,
    compute_policy_loss_cispo,
    compute_policy_loss_clip_cov,
    compute_policy_loss_geo_mean,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    compute_policy_loss_kl_cov,
    compute_policy_loss_vanilla,
)
from verl.algorithms.policy_loss_bypass import compute_policy_loss_bypass_mode, compute_policy_loss_reinforce
from verl.algorithms.policy_loss_gvpo import compute_policy_loss_gvpo
from verl.algorithms.policy_loss_trust_region import (
    compute_policy_loss_dppo_kl,
    compute_policy_loss_dppo_tv,
    compute_policy_loss_dro,
    compute_policy_loss_sapo,
)
from verl.algorithms.registry import (
    ADV_ESTIMATOR_REGISTRY,
    POLICY_LOSS_REGISTRY,
    AdvantageEstimator,
    AdvEstimatorFn,
    PolicyLossFn,
    get_adv_estimator_fn,
    get_config_value,
    get_policy_loss_fn,
    register_adv_est,
    register_policy_loss,
)
from verl.algorithms.spo import compute_spo_advantage
from verl.algorithms.sppo import compute_policy_loss_sppo, compute_sppo_outcome_advantage

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "KL_PENALTY_TYPES",
    "LOSS_AGG_MODES",
    "POLICY_LOSS_REGISTRY",
    "AdaptiveKLController",
    "AdvEstimatorFn",
    "AdvantageEstimator",
    "FixedKLController",
    "PolicyLossFn",
    "agg_loss",
    "compute_entropy_loss",
    "compute_gae_advantage_return",
    "compute_gdpo_outcome_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "compute_optimal_token_baseline_advantage",
    "compute_policy_loss_bypass_mode",
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_flowrl",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dro",
    "compute_policy_loss_reinforce",
    "compute_policy_loss_sapo",
    "compute_policy_loss_gvpo",
    "compute_policy_loss_online_dpo",
    "compute_policy_loss_sppo",
    "compute_spo_advantage",
    "compute_sppo_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_pf_ppo_reweight_data",
    "compute_policy_loss",
    "compute_policy_loss_cispo",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_vanilla",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rewards",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_value_loss",
    "get_adv_estimator_fn",
    "get_config_value",
    "get_kl_controller",
    "get_policy_loss_fn",
    "group_ids_to_tensor",
    "kl_penalty",
    "kl_penalty_forward",
    "register_adv_est",
    "register_policy_loss",
]
