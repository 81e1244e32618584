"""The PPO driver's checkpoints: :class:`DriverCheckpoints`, the part of
:class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer` held as ``trainer.checkpoints``.

A checkpoint is ``global_step_N/{actor,critic}`` (the workers' shards) plus ``data.pt`` (the driver's state: step,
epoch, data loader position, generation counter, KL coefficient), written in a temporary directory and renamed into
place, then marked complete; see ``docs/checkpointing.md``. The part holds where checkpoints go, what run they are
of (the identity), and what was resumed; it is given the worker groups to save or load and the driver state to
write, so it works without a trainer.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["DriverCheckpoints"]

logger = logging.getLogger(__name__)


class DriverCheckpoints:
    """Save, find and load the driver's checkpoints under ``checkpoint_dir``.

    ``trainer_cfg`` is the ``trainer`` section (:class:`~verl.trainer.config.schema.TrainerConfig` or its DictConfig
    node: ``save_freq``, ``resume_mode``, ``resume_from_path``, ``max_actor_ckpt_to_keep``,
    ``max_critic_ckpt_to_keep``).
    ``run_identity`` is what this run's checkpoints are of (model, algorithm, roles, LoRA rank;
    :mod:`verl.checkpoint.identity`): recorded in each completion marker, compared before each resume; when None it
    is derived on first use by ``identity_source`` (None: the run records no identity)."""

    def __init__(
        self,
        trainer_cfg: Any,
        checkpoint_dir: str,
        run_identity: dict[str, Any] | None = None,
        identity_source: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.trainer_cfg = trainer_cfg
        self.checkpoint_dir = checkpoint_dir
        self.run_identity = run_identity
        self.identity_source = identity_source
        # the driver state (data.pt) of the checkpoint the driver resumed from, None when none was
        self.resumed_state: dict[str, Any] | None = None
        # the checkpoint directory the driver resumed from, None when the run started fresh
        self.resumed_from: str | None = None
        self._root_checked = False  # the checkpoint root holds no other run's checkpoints (checked at first save)
        self._size_explained = False  # the first save line says why the optimizer state is the bulk

    def step_dir(self, step: int) -> str:
        """``<checkpoint_dir>/global_step_<step>``."""
        return os.path.join(self.checkpoint_dir, f"global_step_{step}")

    def identity(self) -> dict[str, Any] | None:
        """This run's identity (given, or from ``identity_source``); None, with a warning, when the model directory
        cannot be read (the checkpoint then records none)."""
        if self.run_identity is None and self.identity_source is not None:
            try:
                self.run_identity = self.identity_source()
            except (OSError, ValueError) as err:
                logger.warning("checkpoints of this run record no identity: cannot read the model config (%s)", err)
                return None
        return self.run_identity

    def save(
        self,
        step: int,
        groups: dict[str, Any],
        driver_state: Callable[[], dict[str, Any]],
        path: str | None = None,
        save_contents: list[str] | None = None,
    ) -> str:
        """Write ``<dir>/<role>`` for each worker group of ``groups`` (``{"actor": wg, "critic": wg}``) and
        ``driver_state()`` as ``data.pt`` atomically, then mark the directory complete (``checkpoint_complete.json``).

        ``path`` None: ``step_dir(step)``, then the ``latest_checkpointed_iteration.txt`` tracker, retention
        (``trainer.max_{actor,critic}_ckpt_to_keep``) and the size line. An explicit ``path`` gets the completion
        marker only. ``save_contents`` (subset of ``model``, ``optimizer``, ``extra``) selects what the workers
        write; without ``extra`` no ``data.pt`` either. ``driver_state`` is called inside the temporary directory,
        after the workers wrote theirs."""
        from verl.checkpoint.layout import (
            check_checkpoint_root,
            finalize_checkpoint,
            remove_old_checkpoints,
            write_complete_marker,
        )
        from verl.utils.fs import atomic_directory

        if path is None and not self._root_checked:
            # (the Python API saves without fit()) another run's checkpoints here would be replaced step by step
            # and deleted by retention: refused before anything is written
            check_checkpoint_root({"resume_mode": "auto"}, self.identity, self.checkpoint_dir)
            self._root_checked = True
        final_dir = path or self.step_dir(step)
        with atomic_directory(final_dir) as tmp_dir:
            for role, group in groups.items():
                group.save_checkpoint(os.path.join(tmp_dir, role), step, save_contents=save_contents)
            if save_contents is None or "extra" in save_contents:
                torch.save(driver_state(), os.path.join(tmp_dir, "data.pt"))
            if path is not None:  # marked inside the temp dir: the directory appears complete in one rename
                write_complete_marker(tmp_dir, step, identity=self.identity())
        if path is not None:
            return final_dir
        finalize_checkpoint(self.checkpoint_dir, step, identity=self.identity())
        for role, keep in (("actor", "max_actor_ckpt_to_keep"), ("critic", "max_critic_ckpt_to_keep")):
            keep_n = int(getattr(self.trainer_cfg, keep) or 0)
            remove_old_checkpoints(self.checkpoint_dir, keep_n, subdir=role, current_step=step)
        self._say_size(final_dir)
        return final_dir

    def _say_size(self, step_dir: str) -> None:
        """The save line: the checkpoint's size, split into weights and optimizer state (the first save says why
        the optimizer state is the bulk and which key leaves it out; later saves only the sizes)."""
        from verl.checkpoint.sizes import checkpoint_bytes, checkpoint_size_line, format_bytes
        from verl.utils.logging_utils import console_write

        if self._size_explained:
            console_write(f"checkpoint {step_dir}: {format_bytes(sum(checkpoint_bytes(step_dir).values()))}")
            return
        self._size_explained = True
        console_write(checkpoint_size_line(step_dir))

    def due(self, step: int, is_last: bool, stop_requested: bool) -> bool:
        """Whether ``step`` saves (``trainer.save_freq``): every that many steps (> 0), after the last step and on a
        stop request (the step just finished), unless ``save_freq`` is 0."""
        save_freq = int(self.trainer_cfg.save_freq)
        return (save_freq > 0 and step % save_freq == 0) or ((is_last or stop_requested) and save_freq != 0)

    def say_stopped(self, signal_name: str, step: int, saved_at: int) -> None:
        """The line of a run a signal stopped after ``step``: which checkpoint (of step ``saved_at``) it resumes
        from (written above the progress bar, which is still shown)."""
        from verl.utils.logging_utils import console_write

        if int(self.trainer_cfg.save_freq) == 0:
            where = "no checkpoint (trainer.save_freq=0)"
        elif saved_at > 0:
            where = f"checkpoint {self.step_dir(saved_at)}"
        else:
            where = "no checkpoint (no step had finished)"
        message = f"[verl] stopped by {signal_name} after step {step}; {where}; run the same command again to resume"
        console_write(message, sys.stderr)

    def find(self, path: str | None = None, mode: str = "resume_path") -> tuple[str, dict[str, Any]] | None:
        """The checkpoint to resume and its ``data.pt`` dict; None when the run starts fresh.

        ``path`` None: per ``trainer.resume_mode`` (auto: the newest complete checkpoint whose files match their
        checksums). An explicit ``path`` must be intact and of this run (``mode``: ``resume_path``, named by the
        user, an algorithm change only warns; ``auto``: found by the caller under its root). A checkpoint of another
        model raises :class:`~verl.checkpoint.identity.CheckpointMismatchError` before anything loads."""
        from verl.checkpoint.checkpoint_manager import safe_torch_load
        from verl.checkpoint.identity import check_resume_identity
        from verl.checkpoint.layout import require_intact, resolve_resume_path

        if path is None:
            path = resolve_resume_path(self.trainer_cfg, self.checkpoint_dir, identity=self.identity)
            if path is None:
                return None
        elif not os.path.isdir(path):
            raise FileNotFoundError(f"checkpoint {path!r} does not exist")
        else:
            require_intact(path)
            check_resume_identity(path, self.identity, mode)
        data_file = os.path.join(path, "data.pt")
        if not os.path.exists(data_file):
            raise FileNotFoundError(
                f"checkpoint {path!r} has no training state {data_file!r} (saved with save_training_state=False?): "
                "it holds weights only and cannot be resumed from"
            )
        return path, safe_torch_load(data_file, "the driver's training state (step, data position, KL coefficient)")

    def load_workers(self, path: str, groups: dict[str, Any]) -> None:
        """Restore each worker group of ``groups`` from ``<path>/<role>`` (weights, optimizer, lr scheduler, RNG)."""
        for role, group in groups.items():
            group.load_checkpoint(os.path.join(path, role))

    def mark_resumed(self, path: str, state: dict[str, Any], epoch: int) -> None:
        """Record the resume (:attr:`resumed_from`, :attr:`resumed_state`) and say it before the first step, so a run
        that continues is never mistaken for one that started over."""
        self.resumed_state = state
        self.resumed_from = path
        message = f"resumed from {path} at step {int(state['global_steps'])} (epoch {epoch})"
        logger.info(message)
        print(f"[verl] {message}", flush=True)
