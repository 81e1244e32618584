"""The closed sets of choices config values take (checked by the validator as ``Literal`` types)."""

from __future__ import annotations

from typing import Literal

WarmupStyle = Literal["constant", "cosine"]
LossAggMode = Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
CheckpointContent = Literal["model", "optimizer", "extra", "hf_model"]
# auto: bf16 where the device multiplies bf16 natively, else fp32 (verl/hardware/precision.py decides)
ComputeDType = Literal["auto", "bfloat16", "float16", "float32"]
