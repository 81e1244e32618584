"""Typed ``algorithm`` section: advantage estimation, the KL-in-reward controller, DAPO's group filter, PF-PPO and
the rollout correction (verl's ``AlgoConfig`` and its parts).

The algorithms read their defaults from here (a partial section given through the Python API is completed from
these dataclasses with :func:`verl.base_config.omega_conf_to_dataclass`), so this module sits on the algorithms'
floor: it imports nothing but :mod:`verl.base_config`. :mod:`verl.trainer.config.schema` re-exports every class, and
the test of the packaged YAML keeps ``ppo_trainer.yaml``'s ``algorithm`` section identical to these defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from verl.algorithms.rollout_correction_presets import RolloutCorrectionPresets
from verl.base_config import BaseConfig

__all__ = [
    "AlgorithmConfig",
    "FilterGroupsConfig",
    "KLControlConfig",
    "PFPPOConfig",
    "RolloutCorrectionConfig",
    "SPOConfig",
    "SPORhoConfig",
]


@dataclass
class KLControlConfig(BaseConfig):
    """``algorithm.kl_ctrl``: the KL-in-reward coefficient, fixed or adaptive (Ziegler et al. 2019)."""

    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1
    kl_coef_max: Optional[float] = None  # cap of the adaptive coefficient; None: no cap


@dataclass
class FilterGroupsConfig(BaseConfig):
    """``algorithm.filter_groups``: DAPO dynamic sampling (drop groups whose metric is equal for all members)."""

    enable: bool = False
    metric: Optional[str] = "acc"  # null (upstream v0.9's default) only while enable=false
    max_num_gen_batches: int = 0


@dataclass
class PFPPOConfig(BaseConfig):
    """``algorithm.pf_ppo``: how ``use_pf_ppo`` resamples the batch (verl/algorithms/pf_ppo.py)."""

    reweight_method: Literal["pow", "max_min", "max_random"] = "pow"
    weight_pow: float = 2.0  # pow: weight = |score| ** weight_pow


@dataclass
class RolloutCorrectionConfig(RolloutCorrectionPresets, BaseConfig):
    """``algorithm.rollout_correction``: correct for the rollout engine's probabilities differing from the trainer's
    (verl/algorithms/rollout_correction.py, rollout_rejection.py; upstream verl v0.9's keys and presets, see
    docs/algorithms.md; upstream's named presets are its classmethods, from
    :mod:`verl.algorithms.rollout_correction_presets`). Off by default; any of ``rollout_is``, ``rollout_rs``,
    ``rollout_token_veto_threshold`` or ``bypass_mode`` needs ``actor_rollout_ref.rollout.calculate_log_probs``."""

    rollout_is: Optional[Literal["token", "sequence"]] = None  # importance weights; None: no weights
    # a number: truncation of the weights (TIS); "lower_upper" (e.g. "0.5_5.0"): IcePop, weights outside -> 0
    rollout_is_threshold: Optional[Union[float, str]] = 2.0  # null only when nothing reads it (rollout_is null)
    rollout_is_batch_normalize: bool = False  # divide the weights by their batch mean
    # rejection: token | sequence | geometric (bounds [rollout_rs_threshold_lower, rollout_rs_threshold] on the
    # weight), or upstream v0.9's comma-separated divergence options (token_k1, seq_mean_k1, seq_max_k2, ...)
    rollout_rs: Optional[str] = None
    rollout_rs_threshold: Optional[Union[float, str]] = None  # per option, comma-separated; k1: "lower_upper"
    rollout_rs_threshold_lower: Optional[float] = None  # token|sequence|geometric only; None: 1 / upper
    rollout_token_veto_threshold: Optional[float] = None  # reject a response holding a token weight below this
    bypass_mode: bool = False  # the rollout's log-probs are the old policy (no old-log-prob pass)
    loss_type: Literal["ppo_clip", "reinforce"] = "ppo_clip"  # bypass mode's loss: PPO clip or REINFORCE x weights


@dataclass
class SPORhoConfig(BaseConfig):
    """``algorithm.spo.rho``: how fast SPO's per-prompt value forgets old outcomes (verl/algorithms/spo.py)."""

    # kl: from how far the policy moved on the prompt's previous response; constant: rho = value
    type: Literal["kl", "constant"] = "kl"
    value: float = 0.875  # type=constant: the discount
    # type=kl: the discount's floor; also sets the offline prior's weight, 1 / (1 - clip_lower) outcomes
    clip_lower: float = 0.875


@dataclass
class SPOConfig(BaseConfig):
    """``algorithm.spo``: Single-stream Policy Optimization (Xu & Ding 2025; verl-recipe spo's ``trainer.spo``
    keys, read here too): a tracked per-prompt value as the baseline, prompts drawn by priority out of each loader
    batch (verl/algorithms/spo.py, verl/trainer/ppo/spo_driver.py). ``enable`` and ``adv_estimator=spo`` are one
    switch."""

    enable: bool = False
    offline_values: Optional[str] = None  # JSON {prompt: [scores]} of the base policy (the recipe's merged file)
    offline_N: int = 8  # scores per prompt the prior takes (more are subsampled); 0: every prompt at p_hat = 1/2
    rho: SPORhoConfig = field(default_factory=SPORhoConfig)


@dataclass
class AlgorithmConfig(BaseConfig):
    """``algorithm``: advantage estimation and the KL-in-reward penalty."""

    gamma: float = 1.0
    lam: float = 1.0
    adv_estimator: str = "gae"  # checked against core_algos.ADV_ESTIMATOR_REGISTRY
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    use_pf_ppo: bool = False  # PF-PPO: resample the batch by reward confidence after GAE
    sppo_eta: float = 1.0  # adv_estimator=sppo: beta of the batch's soft mean of rewards (verl-recipe sppo; 0: mean)
    pf_ppo: PFPPOConfig = field(default_factory=PFPPOConfig)
    # adv_estimator=gdpo: the reward function's dict keys normalised one by one, and their weights (None: all 1);
    # upstream's config lacks both and its scripts add them with +
    gdpo_reward_keys: Optional[list[str]] = None
    gdpo_reward_weights: Optional[list[float]] = None
    spo: SPOConfig = field(default_factory=SPOConfig)  # adv_estimator=spo
