"""The FSDP2 engine sections (``fsdp_config``): offloading, resharding, the sharding group size."""

from __future__ import annotations

from dataclasses import dataclass

from verl.base_config import BaseConfig


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


@dataclass
class RefFSDPConfig(BaseConfig):
    """``ref.fsdp_config``: the reference model is never trained, so it has no optimizer to offload."""

    param_offload: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
