"""The model sections: the policy (``actor_rollout_ref.model``), the value model (``critic.model``) and the
reward model (``reward_model.model``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from verl.base_config import BaseConfig, dict_field

FUSED_KERNEL_BACKENDS = ("torch", "triton")


@dataclass
class FusedKernelOptionsConfig(BaseConfig):
    """``model.fused_kernel_options``: upstream's fused LM-head/log-prob kernel backend (``torch`` | ``triton``);
    here both select the same chunked LM head in plain torch (verl/utils/kernel/linear_cross_entropy.py)."""

    # torch | triton (a str, not a Literal, so OmegaConf.structured takes the model section, as upstream's)
    impl_backend: str = "torch"

    def __post_init__(self) -> None:
        if self.impl_backend not in FUSED_KERNEL_BACKENDS:
            raise ValueError(
                f"model.fused_kernel_options.impl_backend={self.impl_backend!r}: expected one of "
                f"{list(FUSED_KERNEL_BACKENDS)}"
            )


@dataclass
class ModelConfig(BaseConfig):
    """``actor_rollout_ref.model``: the policy model shared by actor, rollout and reference."""

    path: str = "smollm2-135m-instruct"
    tokenizer_path: Optional[str] = None
    custom_chat_template: Optional[str] = None  # upstream v0.9: a Jinja chat template replacing the tokenizer's
    trust_remote_code: bool = False
    enable_gradient_checkpointing: bool = False
    use_remove_padding: Optional[bool] = None  # null: packed where it equals padded (fsdp_utils.resolve_remove_padding)
    lora_rank: int = 0
    lora_alpha: int = 16
    lora_adapter_path: Optional[str] = None  # start LoRA from a saved PEFT adapter (its rank/alpha/targets) (lora.py)
    # str or list[str] (checked in __post_init__; typed Any so OmegaConf.structured takes either, as upstream's)
    target_modules: Optional[Any] = "all-linear"
    exclude_modules: Optional[Any] = None  # LoRA: modules left without adapters (PEFT's key); str or list[str]
    use_shm: bool = False  # load from a copy in /dev/shm (verl/models/shm.py)
    enable_activation_offload: bool = False  # actor training forwards save activations in pinned host memory
    override_config: dict[str, Any] = dict_field()
    attn_implementation: str = "auto"  # auto | eager | sdpa | flash_attention_2
    # log-probs and entropy through the LM head in chunks, never [batch, seq, vocab] logits (fused_head.py)
    use_fused_kernels: bool = False
    # upstream's Liger switch: true turns use_fused_kernels on (Liger's LM-head kernel is a fused linear
    # cross-entropy, the same chunked head; verl/trainer/config/upstream_keys.py)
    use_liger: bool = False
    fused_kernel_options: FusedKernelOptionsConfig = field(default_factory=FusedKernelOptionsConfig)

    def __post_init__(self) -> None:
        for key in ("target_modules", "exclude_modules"):
            _check_module_names(key, getattr(self, key))


def _check_module_names(key: str, value: Any) -> None:
    """``model.target_modules`` / ``exclude_modules``: None, a string (``all-linear``, a regex) or a list of
    strings (module names); anything else is a ``TypeError`` naming the key (upstream v0.9's rule)."""
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, (list, tuple)) or isinstance(value, bool):
        raise TypeError(f"model.{key} must be a string or a list of strings, got {type(value).__name__}: {value!r}")
    bad = [x for x in value if not isinstance(x, str)]
    if bad:
        raise TypeError(f"model.{key} must list strings (module names), got {type(bad[0]).__name__}: {bad[0]!r}")


#: upstream verl v0.9's name of the policy model section (``verl.workers.config.HFModelConfig``)
HFModelConfig = ModelConfig


@dataclass
class CriticModelConfig(BaseConfig):
    """``critic.model``: the value model (by default initialised from the policy checkpoint)."""

    path: str = "smollm2-135m-instruct"  # YAML: ${actor_rollout_ref.model.path}
    tokenizer_path: Optional[str] = "smollm2-135m-instruct"  # YAML: ${actor_rollout_ref.model.path}
    trust_remote_code: bool = False  # run the model repository's own code (auto_map) to build the value model
    enable_gradient_checkpointing: bool = False
    use_remove_padding: bool = False
    use_shm: bool = False  # load from a copy in /dev/shm (verl/models/shm.py)
    override_config: dict[str, Any] = dict_field()
    attn_implementation: str = "auto"  # auto | eager | sdpa | flash_attention_2


@dataclass
class RewardModelWrapPolicyConfig(BaseConfig):
    """``reward_model.model.fsdp_config.wrap_policy``: upstream's default; a value set by the user is refused."""

    min_num_params: int = 0


@dataclass
class RewardModelFSDPConfig(BaseConfig):
    """``reward_model.model.fsdp_config`` (verl's legacy reward-model worker). The reward model is not sharded here:
    every rank holds the whole model for a forward pass, so only ``param_offload`` applies; the sharding keys are
    upstream's defaults, and a value set by the user is refused (``verl/trainer/config/reward_section.py``)."""

    param_offload: bool = False  # the reward model in CPU memory between scoring calls, on the device while scoring
    wrap_policy: RewardModelWrapPolicyConfig = field(default_factory=RewardModelWrapPolicyConfig)
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    forward_prefetch: bool = False


@dataclass
class RewardModelModelConfig(BaseConfig):
    """``reward_model.model``: a model-based scorer (sequence classifier) when ``reward_model.enable``."""

    path: Optional[str] = None
    input_tokenizer: Optional[str] = None
    use_remove_padding: bool = False  # score the valid tokens packed (no padding computed): verl/utils/padding.py
    fsdp_config: RewardModelFSDPConfig = field(default_factory=RewardModelFSDPConfig)
