"""The FSDP2 engine sections (``fsdp_config``): offloading, resharding, the sharding group size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from verl.base_config import BaseConfig, dict_field

# upstream v0.9's fsdp_config.model_dtype spellings: fp32 keeps fp32 parameters (ours always); bf16 makes FSDP2
# gather the parameters in bf16 for compute (MixedPrecisionPolicy), the sharded master copy staying fp32
ModelDType = Literal["fp32", "float32", "bf16", "bfloat16"]


@dataclass
class MixedPrecisionConfig(BaseConfig):
    """``fsdp_config.mixed_precision`` (verl's FSDP key): the dtypes of FSDP2's ``MixedPrecisionPolicy``. The section
    is a mapping in the config, as upstream's scripts add its keys with ``+``; this class reads and checks it.

    ``param_dtype``: the dtype parameters are gathered in for compute; ``model_dtype`` under another name (one
    setting, verl/trainer/config/upstream_keys.py; null: ``model_dtype`` decides). ``reduce_dtype``: the dtype
    gradients are reduced across ranks in (bf16 halves the traffic and rounds the sum); the sharded master copy and
    the optimizer stay fp32 either way. ``buffer_dtype``: buffers (rotary tables, ...) stay fp32, the only value.
    """

    param_dtype: Optional[ModelDType] = None
    reduce_dtype: ModelDType = "fp32"
    buffer_dtype: Literal["fp32", "float32"] = "fp32"

    def __post_init__(self) -> None:
        dtypes = ("fp32", "float32", "bf16", "bfloat16")
        for key, allowed in (("param_dtype", (None, *dtypes)), ("reduce_dtype", dtypes), ("buffer_dtype", dtypes[:2])):
            value = getattr(self, key)
            if value not in allowed:
                raise ValueError(
                    f"mixed_precision.{key}={value}: one of {', '.join(str(a) for a in allowed if a)} here"
                    + (" (buffers stay fp32)" if key == "buffer_dtype" else "")
                )


@dataclass
class FSDPConfig(BaseConfig):
    """``fsdp_config`` of a trained model (actor, critic): offloading, resharding and the sharding group size.

    ``fsdp_size``: -1 shards over every rank (FSDP); ``k`` shards within groups of ``k`` ranks and replicates
    across the ``world / k`` groups (hybrid sharding, HSDP).
    """

    param_offload: bool = False
    optimizer_offload: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    # upstream v0.9 keys (docs/porting_from_verl.md, "verl v0.9 keys")
    offload_policy: bool = False  # FSDP2 CPUOffloadPolicy: parameters live on CPU, moved per layer in forward
    forward_prefetch: bool = False  # all-gather layer i+1 while layer i computes (FSDP2 explicit prefetch)
    model_dtype: ModelDType = "fp32"
    use_orig_params: bool = False  # FSDP1 flag; FSDP2 always exposes the original parameters
    ulysses_sequence_parallel_size: int = 1  # YAML: ${..ulysses_sequence_parallel_size} (one setting, two names)
    qat: dict[str, Any] = dict_field()  # upstream v0.9's quantization-aware training: enable=true is refused
    # verl's FSDP key, as upstream's scripts add it (+...mixed_precision.param_dtype=bf16): MixedPrecisionConfig's keys
    mixed_precision: dict[str, Any] = dict_field()


@dataclass
class RefFSDPConfig(BaseConfig):
    """``ref.fsdp_config``: the reference model is never trained, so it has no optimizer to offload."""

    param_offload: bool = False
    optimizer_offload: bool = False  # upstream's shared engine key: the reference has no optimizer, nothing to move
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    offload_policy: bool = False
    forward_prefetch: bool = False
    model_dtype: ModelDType = "fp32"
    use_orig_params: bool = False
    ulysses_sequence_parallel_size: int = 1  # YAML: ${..ulysses_sequence_parallel_size}
    qat: dict[str, Any] = dict_field()
    mixed_precision: dict[str, Any] = dict_field()  # MixedPrecisionConfig's keys; the reference reduces no gradients
