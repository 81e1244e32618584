"""The model sections: the policy (``actor_rollout_ref.model``), the value model (``critic.model``) and the
reward model (``reward_model.model``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from verl.base_config import BaseConfig, dict_field


@dataclass
class ModelConfig(BaseConfig):
    """``actor_rollout_ref.model``: the policy model shared by actor, rollout and reference."""

    path: str = "smollm2-135m-instruct"
    tokenizer_path: Optional[str] = None
    trust_remote_code: bool = False
    enable_gradient_checkpointing: bool = False
    use_remove_padding: Optional[bool] = None  # null: on with flash-attention (varlen) kernels, else off
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: Union[str, list[str]] = "all-linear"
    override_config: dict[str, Any] = dict_field()
    attn_implementation: str = "auto"  # auto | eager | sdpa | flash_attention_2


@dataclass
class CriticModelConfig(BaseConfig):
    """``critic.model``: the value model (by default initialised from the policy checkpoint)."""

    path: str = "smollm2-135m-instruct"  # YAML: ${actor_rollout_ref.model.path}
    tokenizer_path: Optional[str] = "smollm2-135m-instruct"  # YAML: ${actor_rollout_ref.model.path}
    enable_gradient_checkpointing: bool = False
    use_remove_padding: bool = False
    override_config: dict[str, Any] = dict_field()
    attn_implementation: str = "auto"  # auto | eager | sdpa | flash_attention_2


@dataclass
class RewardModelModelConfig(BaseConfig):
    """``reward_model.model``: a model-based scorer (sequence classifier) when ``reward_model.enable``."""

    path: Optional[str] = None
    input_tokenizer: Optional[str] = None
