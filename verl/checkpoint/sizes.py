"""What a checkpoint's bytes are: model weights, optimizer state, the rest; one line for the console.

A full-parameter checkpoint is dominated by the optimizer: AdamW keeps two fp32 moments per trained weight, so
next to fp32 weights (4 bytes each) it adds 8 bytes per weight. A 135M model's checkpoint is then about
135M x (4 + 8) = 1.6 GB, of which 1.1 GB is optimizer state. ``*.checkpoint.save_contents=[model,extra]`` leaves
the optimizer out (a resume then starts AdamW's moments from zero), the ``hf_model`` export holds the weights only.
"""

from __future__ import annotations

import os

__all__ = ["checkpoint_bytes", "checkpoint_size_line", "format_bytes"]


def format_bytes(n: int) -> str:
    """``1_600_000_000`` -> ``"1.6 GB"`` (decimal units, as ``du --si`` and file browsers show)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def checkpoint_bytes(step_dir: str) -> dict[str, int]:
    """Bytes under ``step_dir`` by kind: ``model`` (``model_*`` weight shards), ``optimizer`` (``optim_*``
    shards), ``other`` (driver and RNG state, configs, tokenizer files)."""
    sizes = {"model": 0, "optimizer": 0, "other": 0}
    for root, _, files in os.walk(step_dir):
        for name in files:
            try:
                size = os.path.getsize(os.path.join(root, name))
            except OSError:
                continue
            kind = "optimizer" if name.startswith("optim") else "model" if name.startswith("model") else "other"
            sizes[kind] += size
    return sizes


def checkpoint_size_line(step_dir: str, contents_key: str = "actor_rollout_ref.actor.checkpoint.save_contents") -> str:
    """``checkpoint <dir>: 1.6 GB (weights 0.5 GB, optimizer state 1.1 GB: AdamW's two fp32 moments per weight;
    <contents_key>=[model,extra] leaves it out, a resume then restarts the optimizer)``."""
    sizes = checkpoint_bytes(step_dir)
    total = sum(sizes.values())
    parts = [f"weights {format_bytes(sizes['model'])}"]
    if sizes["optimizer"]:
        parts.append(
            f"optimizer state {format_bytes(sizes['optimizer'])}: AdamW's two fp32 moments per trained weight; "
            f"{contents_key}=[model,extra] leaves it out, and a resume then restarts the optimizer"
        )
    else:
        parts.append("no optimizer state: a resume restarts the optimizer")
    if sizes["other"]:
        parts.append(f"other {format_bytes(sizes['other'])}")
    return f"checkpoint {step_dir}: {format_bytes(total)} ({'; '.join(parts)})"
