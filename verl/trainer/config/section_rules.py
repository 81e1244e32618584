"""Config-time checks of the rules the typed sections enforce at construction (upstream verl v0.9's
``verl/workers/config`` rules), so a PPO config breaking one is refused when it loads, with the key named, rather
than when a worker builds its section."""

from __future__ import annotations

from omegaconf import DictConfig

from verl.sections.model import FUSED_KERNEL_BACKENDS

__all__ = ["check_section_rules"]


def check_section_rules(cfg: DictConfig, use_critic: bool, errors: list[str]) -> None:
    """Append one line per broken rule to ``errors``: ``actor.rollout_n`` (upstream's second name of
    ``rollout.n``) equals ``rollout.n``; a null ``ppo_micro_batch_size_per_gpu`` only with ``use_dynamic_bsz``
    (actor, and the critic when it trains); ``model.fused_kernel_options.impl_backend`` is ``torch`` or ``triton``.
    """
    arr = cfg.actor_rollout_ref
    n = arr.rollout.n
    if arr.actor.rollout_n != n:
        errors.append(
            f"actor_rollout_ref.actor.rollout_n={arr.actor.rollout_n} differs from actor_rollout_ref.rollout.n={n}; "
            "it is upstream's second name of rollout.n (leave it at its default, which follows rollout.n)"
        )
    sections = [("actor_rollout_ref.actor", arr.actor)] + ([("critic", cfg.critic)] if use_critic else [])
    for who, section in sections:
        if not section.use_dynamic_bsz and section.ppo_micro_batch_size_per_gpu is None:
            errors.append(
                f"{who}.ppo_micro_batch_size_per_gpu=null needs {who}.use_dynamic_bsz=true; set a micro-batch size "
                "(sequences per forward/backward)"
            )
    backend = arr.model.fused_kernel_options.impl_backend
    if backend not in FUSED_KERNEL_BACKENDS:
        errors.append(
            f"actor_rollout_ref.model.fused_kernel_options.impl_backend={backend!r}: expected one of "
            f"{list(FUSED_KERNEL_BACKENDS)} (both select the chunked plain-torch LM head here)"
        )
