"""Which settings ``actor.use_prefix_grouper=true`` cannot serve: one refusal line each, at config time (the
config checks) and when an actor is built (:mod:`verl.workers.actor.prefix_grouping` does the grouped forward).

The grouped forward packs each prompt group into one padded row with a custom 4-D attention mask, so it needs the
padded input (no ``use_remove_padding``), whole sequences on a rank (no Ulysses), the logits (no fused LM-head
kernels), text rows (no images) and an attention implementation that takes such a mask (``eager``, ``sdpa``).
"""

from __future__ import annotations

from typing import Any

KEY = "actor_rollout_ref.actor.use_prefix_grouper"
# attention implementations that take a custom 4-D mask as it is (transformers' masking_utils passes it through)
MASKED_ATTENTION = ("eager", "sdpa")


def refusal(use_remove_padding: bool, ulysses: bool, use_fused_kernels: bool, multi_modal: bool = False) -> str | None:
    """One line refusing a setting the grouped forward cannot serve (None when it can)."""
    if use_remove_padding:
        return (
            f"{KEY}=true packs each prompt group into one padded row; set actor_rollout_ref.model.use_remove_padding="
            "false (the grouped rows already hold valid tokens only)"
        )
    if ulysses:
        return f"{KEY}=true is not implemented with Ulysses sequence parallelism; set ulysses_sequence_parallel_size=1"
    if use_fused_kernels:
        return f"{KEY}=true needs the logits of the packed rows; set actor_rollout_ref.model.use_fused_kernels=false"
    if multi_modal:
        return f"{KEY}=true is not implemented for vision-language batches (images per row); set it to false"
    return None


def config_errors(cfg: Any) -> list[str]:
    """Config-time refusals of ``use_prefix_grouper=true`` combined with settings it cannot serve (one line each)."""
    arr = cfg.actor_rollout_ref
    if not bool(arr.actor.use_prefix_grouper):
        return []
    errors: list[str] = []
    impl = str(arr.model.attn_implementation)
    if impl.startswith("flash_attention") or impl == "flex_attention":
        errors.append(
            f"{KEY}=true needs attention that takes a custom 4-D mask (eager or sdpa), got "
            f"actor_rollout_ref.model.attn_implementation={impl}; set it to sdpa (or auto)"
        )
    sp = max(int(arr.actor.ulysses_sequence_parallel_size), int(arr.ref.ulysses_sequence_parallel_size))
    line = refusal(bool(arr.model.use_remove_padding), sp > 1, bool(arr.model.use_fused_kernels))
    if line is not None:
        errors.append(line)
    return errors
