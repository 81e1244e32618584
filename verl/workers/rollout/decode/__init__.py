"""The ``hf`` engine's decode loop (:mod:`.loop`) and the model forwards it runs (:mod:`.static_cache`,
:mod:`.model_forward`)."""

from verl.workers.rollout.decode.loop import (
    CPU_AUTO_MODE,
    DECODE_MODES,
    DecodeLoop,
    attention_window,
    bucket_size,
    decode_forward_for,
    resolve_decode_mode,
)
from verl.workers.rollout.decode.model_forward import FullForward, ModelCacheForward, supports_model_cache
from verl.workers.rollout.decode.state import DecodeState
from verl.workers.rollout.decode.static_cache import StaticCacheForward, supports_static_cache

__all__ = [
    "CPU_AUTO_MODE",
    "DECODE_MODES",
    "DecodeLoop",
    "DecodeState",
    "FullForward",
    "ModelCacheForward",
    "StaticCacheForward",
    "attention_window",
    "bucket_size",
    "decode_forward_for",
    "resolve_decode_mode",
    "supports_model_cache",
    "supports_static_cache",
]
