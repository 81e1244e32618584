"""Is the checkpoint a run would resume already its last step? Then there is nothing to train, and the run says so
in one line (where the run is, how to train it longer, how to start it afresh) instead of loading its models,
"resuming" and rewriting its export and report.

Read from the completion markers only (no file hashed, nothing loaded), so the answer comes in seconds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from verl.base_config import get_config_value
from verl.checkpoint.layout import checkpoint_root, get_checkpoint_step, newest_complete_step_dir, resume_mode

__all__ = ["FRESH_HINT", "finished_checkpoint", "finished_run_message"]

# how a finished run is started again from step 0 (every trainer has these keys)
FRESH_HINT = (
    "to run it afresh: trainer.resume_mode=disable trainer.overwrite_checkpoints=true (deletes its checkpoints), "
    "or another trainer.experiment_name"
)


def finished_checkpoint(
    trainer_config: Mapping[str, Any], total_steps: int, root: str | None = None
) -> tuple[str, int] | None:
    """``(step directory, step)`` of the checkpoint a resume would take when its step is ``total_steps`` or later;
    None when the run has steps left, starts fresh (``resume_mode=disable``) or has no checkpoint.

    ``resume_mode=auto``: the newest complete ``global_step_N`` of ``root`` (default
    :func:`~verl.checkpoint.layout.checkpoint_root`); ``resume_path``: ``trainer.resume_from_path``.
    """
    if total_steps <= 0:
        return None
    mode = resume_mode(trainer_config)
    if mode == "auto":
        step_dir = newest_complete_step_dir(root or checkpoint_root(trainer_config))
    elif mode == "resume_path":
        named = get_config_value(trainer_config, "resume_from_path")
        step_dir = str(named) if named and os.path.isdir(str(named)) else None
    else:
        return None
    if step_dir is None:
        return None
    try:
        step = get_checkpoint_step(step_dir)
    except ValueError:
        return None
    return (step_dir, step) if step >= total_steps else None


def finished_run_message(
    trainer_config: Mapping[str, Any], total_steps: int, root: str | None = None, fresh_hint: str = FRESH_HINT
) -> str | None:
    """The one line a run prints instead of training when :func:`finished_checkpoint` finds its last step; None
    when there is something to train. ``fresh_hint`` says how to start it again (``make demo-fresh`` for the demo)."""
    found = finished_checkpoint(trainer_config, total_steps, root)
    if found is None:
        return None
    step_dir, step = found
    run_dir = os.path.dirname(os.path.normpath(step_dir))
    report = os.path.join(run_dir, "report.html")
    seen = f"; report: {report}" if os.path.isfile(report) else ""
    return (
        f"run {run_dir} already finished: its checkpoint {os.path.basename(step_dir)} is step {step} of {total_steps}, "
        f"nothing to train{seen}. To train it longer raise trainer.total_training_steps; {fresh_hint}"
    )
