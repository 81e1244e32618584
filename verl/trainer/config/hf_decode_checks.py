"""Config checks of ``actor_rollout_ref.rollout.engine_kwargs.hf`` (the hf engine's decode loop)."""

from __future__ import annotations

from omegaconf import DictConfig


def check_hf_decode(cfg: DictConfig, errors: list[str]) -> None:
    """``rollout.engine_kwargs.hf``: the hf engine's decode loop; set with ``name=vllm`` it would do nothing (with
    ``auto`` the engine says so when it picks vLLM), and a non-eager mode contradicts ``enforce_eager=true`` (the
    device is checked when the engine starts)."""
    rollout = cfg.actor_rollout_ref.rollout
    hf = rollout.engine_kwargs.hf
    prefix = "actor_rollout_ref.rollout.engine_kwargs.hf"
    chosen = [f"{prefix}.{key}={hf[key]}" for key in ("decode_mode", "decode_weights") if hf[key] is not None]
    if chosen and rollout.name not in ("hf", "auto"):
        errors.append(f"{', '.join(chosen)} configures the hf engine's decode loop; rollout.name={rollout.name}")
    if hf.decode_mode not in (None, "eager") and rollout.enforce_eager:
        errors.append(
            f"{prefix}.decode_mode={hf.decode_mode} contradicts actor_rollout_ref.rollout.enforce_eager=true: "
            "set one of them only"
        )
