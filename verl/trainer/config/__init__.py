"""Trainer configs: packaged YAML defaults, typed dataclass schemas, ``key=value`` overrides and validation.

``load_config(overrides, config_name, config_file, schema)`` is the one entry point; see ``docs/config.md``.
"""

from verl.trainer.config.algorithm import AlgoConfig
from verl.trainer.config.loader import (
    Override,
    apply_overrides,
    config_to_yaml,
    load_config,
    load_user_yaml,
    packaged_config_names,
    packaged_config_text,
    parse_override,
    parse_value,
)
from verl.trainer.config.ppo_checks import critic_enabled, need_reference_policy
from verl.trainer.config.schema import (
    ActorConfig,
    ActorRolloutRefConfig,
    AlgorithmConfig,
    CriticConfig,
    CustomRewardFunctionConfig,
    DataConfig,
    KLControlConfig,
    ModelConfig,
    OptimConfig,
    PolicyLossConfig,
    PPOConfig,
    RefConfig,
    RewardModelConfig,
    RolloutConfig,
    TrainerConfig,
    to_dataclass,
)
from verl.trainer.config.validation import ConfigError, ConfigWarning, validate_config

__all__ = [
    "AlgoConfig",
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AlgorithmConfig",
    "ConfigError",
    "ConfigWarning",
    "CriticConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "KLControlConfig",
    "ModelConfig",
    "OptimConfig",
    "Override",
    "PPOConfig",
    "PolicyLossConfig",
    "RefConfig",
    "RewardModelConfig",
    "RolloutConfig",
    "TrainerConfig",
    "apply_overrides",
    "config_to_yaml",
    "critic_enabled",
    "load_config",
    "load_user_yaml",
    "need_reference_policy",
    "packaged_config_names",
    "packaged_config_text",
    "parse_override",
    "parse_value",
    "to_dataclass",
    "validate_config",
]
