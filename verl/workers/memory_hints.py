"""What to change when a pass of the actor/rollout/reference worker runs out of GPU memory.

torch's out-of-memory error says how much was asked and how much was free, not which of verl's keys would lower the
peak of the pass that failed. :func:`explain_out_of_memory` adds those keys, with the values this run has, to the
error (same type, torch's message first: code that catches ``torch.OutOfMemoryError`` or matches its text still
does). Only keys that are not already at their memory-saving setting are named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from verl.workers.config import ActorRolloutRefConfig

PREFIX = "actor_rollout_ref"


@contextmanager
def explain_out_of_memory(what: str, hints: Callable[[], list[str]]) -> Iterator[None]:
    """Re-raise a ``torch.OutOfMemoryError`` of the block with ``what`` ran out of memory and ``hints()`` (one key
    and why per line) appended to torch's message."""
    try:
        yield
    except torch.OutOfMemoryError as err:
        lines = hints()
        if not lines:
            raise
        advice = "\n".join(f"  - {line}" for line in lines)
        raise torch.OutOfMemoryError(
            f"{err}\n\nverl: {what} ran out of GPU memory. What lowers its peak (docs/hardware.md):\n{advice}"
        ) from err


def _fused_kernels(config: ActorRolloutRefConfig) -> list[str]:
    if config.model.use_fused_kernels:
        return []
    return [
        f"{PREFIX}.model.use_fused_kernels=true: log-probs and entropy through the LM head in chunks, never the "
        "[tokens, vocab] logits (for 16,384 tokens of a 151,936-token vocabulary: 28.8 GB -> 0.8 GB)"
    ]


def _halved(key: str, value: int | None, unit: str) -> list[str]:
    if value is None or int(value) <= 1:
        return []
    return [f"{key}={max(1, int(value) // 2)} (now {int(value)}): fewer {unit} per forward"]


def update_hints(config: ActorRolloutRefConfig) -> list[str]:
    """Keys that lower the peak of the actor's update (forward + backward + optimizer step)."""
    actor = config.actor
    hints: list[str] = []
    if not config.model.enable_gradient_checkpointing:
        hints.append(
            f"{PREFIX}.model.enable_gradient_checkpointing=true: keep one layer's activations, recompute the rest in "
            "the backward (upstream verl's and TRL's default; off here)"
        )
    if actor.use_dynamic_bsz:
        hints += _halved(f"{PREFIX}.actor.ppo_max_token_len_per_gpu", actor.ppo_max_token_len_per_gpu, "tokens")
    else:
        hints += _halved(f"{PREFIX}.actor.ppo_micro_batch_size_per_gpu", actor.ppo_micro_batch_size_per_gpu, "rows")
    hints += _fused_kernels(config)
    if not actor.fsdp_config.offload_policy:
        hints.append(
            f"{PREFIX}.actor.fsdp_config.offload_policy=true: parameters, gradients and the optimizer step in CPU "
            "memory (FSDP2's CPUOffloadPolicy, also on one GPU), each layer on the GPU only while it computes"
        )
    return hints


def log_prob_hints(config: ActorRolloutRefConfig, reference: bool) -> list[str]:
    """Keys that lower the peak of a no-grad log-prob pass: the actor's old log-probs or the reference's."""
    section = config.ref if reference else config.rollout
    name = "ref" if reference else "rollout"
    if section.log_prob_use_dynamic_bsz:
        hints = _halved(f"{PREFIX}.{name}.log_prob_max_token_len_per_gpu", section.log_prob_max_token_len_per_gpu,
                        "tokens")  # fmt: skip
    else:
        hints = _halved(f"{PREFIX}.{name}.log_prob_micro_batch_size_per_gpu",
                        section.log_prob_micro_batch_size_per_gpu, "rows")  # fmt: skip
    return hints + _fused_kernels(config)


def generation_hints(config: ActorRolloutRefConfig) -> list[str]:
    """Keys that lower the peak of generation."""
    rollout = config.rollout
    if rollout.name == "vllm":
        return [
            f"{PREFIX}.rollout.gpu_memory_utilization={rollout.gpu_memory_utilization / 2:g} (now "
            f"{rollout.gpu_memory_utilization:g}): the share of the GPU vLLM takes for weights and KV cache"
        ]
    return _halved(f"{PREFIX}.rollout.max_num_seqs", rollout.max_num_seqs, "sequences decoded together (rows)")
