"""The PPO driver's checkpoints (save, resume, export), a part of :class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer`.

A checkpoint is ``global_step_N/{actor,critic}`` (the workers' shards) plus ``data.pt`` (the driver's state: step,
epoch, data loader position, generation counter, KL coefficient), written in a temporary directory and renamed into
place, then marked complete; see ``docs/checkpointing.md``.

The mixin reads the trainer's ``config``, ``checkpoint_dir``, ``global_steps``, worker groups and data loader; it
holds no state of its own beyond ``run_identity``, ``resumed_state`` and ``resumed_from``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

logger = logging.getLogger(__name__)


class DriverCheckpointMixin:
    """``save_checkpoint``, ``load_checkpoint``, ``driver_state``, ``identity`` and ``export_hf`` of the PPO driver."""

    def step_dir(self, step: int) -> str:
        return os.path.join(self.checkpoint_dir, f"global_step_{step}")

    def identity(self) -> dict[str, Any] | None:
        """This run's identity (:func:`~verl.trainer.ppo.run_identity.ppo_run_identity` of the config unless given);
        None, with a warning, when the model directory cannot be read (the checkpoint then records none)."""
        if self.run_identity is None:
            from verl.trainer.ppo.run_identity import ppo_run_identity

            try:
                self.run_identity = ppo_run_identity(self.config)
            except (OSError, ValueError) as err:
                logger.warning("checkpoints of this run record no identity: cannot read the model config (%s)", err)
                return None
        return self.run_identity

    def save_checkpoint(
        self, path: str | None = None, save_contents: list[str] | None = None, extra_state: dict[str, Any] | None = None
    ) -> str:
        """Write ``global_step_N/{actor,critic}`` and the driver state ``data.pt`` atomically, then mark the
        directory complete (``checkpoint_complete.json``).

        ``path`` None: ``<checkpoint_dir>/global_step_N``, then the ``latest_checkpointed_iteration.txt`` tracker
        and retention. An explicit ``path`` gets the completion marker only (no tracker, no retention).
        ``save_contents`` (subset of ``model``, ``optimizer``, ``extra``; default ``*.checkpoint.save_contents``)
        selects what the workers write; without ``extra`` no ``data.pt`` is written either. ``extra_state`` joins
        ``data.pt`` (plain types and tensors only: it is read back with ``weights_only=True``).
        """
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
        final_dir = path or self.step_dir(self.global_steps)
        with atomic_directory(final_dir) as tmp_dir:
            self.actor_rollout_wg.save_checkpoint(
                os.path.join(tmp_dir, "actor"), self.global_steps, save_contents=save_contents
            )
            if self.use_critic:
                self.critic_wg.save_checkpoint(
                    os.path.join(tmp_dir, "critic"), self.global_steps, save_contents=save_contents
                )
            if save_contents is None or "extra" in save_contents:
                torch.save({**self.driver_state(), **(extra_state or {})}, os.path.join(tmp_dir, "data.pt"))
            if path is not None:  # marked inside the temp dir: the directory appears complete in one rename
                write_complete_marker(tmp_dir, self.global_steps, identity=self.identity())
        if path is not None:
            return final_dir
        finalize_checkpoint(self.checkpoint_dir, self.global_steps, identity=self.identity())
        trainer_cfg = self.config.trainer
        for role, keep in (("actor", "max_actor_ckpt_to_keep"), ("critic", "max_critic_ckpt_to_keep")):
            remove_old_checkpoints(
                self.checkpoint_dir, int(trainer_cfg[keep] or 0), subdir=role, current_step=self.global_steps
            )
        self._say_checkpoint_size(final_dir)
        if not self._in_fit:  # (the Python API) fit() updates the report once the step's metrics are logged
            self.update_report()
        return final_dir

    def _say_checkpoint_size(self, step_dir: str) -> None:
        """The save line: the checkpoint's size, split into weights and optimizer state (the first save says why
        the optimizer state is the bulk and which key leaves it out; later saves only the sizes)."""
        from verl.checkpoint.sizes import checkpoint_bytes, checkpoint_size_line, format_bytes
        from verl.utils.logging_utils import console_write

        if getattr(self, "_size_explained", False):
            console_write(f"checkpoint {step_dir}: {format_bytes(sum(checkpoint_bytes(step_dir).values()))}")
            return
        self._size_explained = True
        console_write(checkpoint_size_line(step_dir))

    def driver_state(self) -> dict[str, Any]:
        """``data.pt``: the step, epoch, data loader position, generation counter, KL coefficient and the data
        ledger (every consumed prompt index, :mod:`~verl.trainer.ppo.resume_check`)."""
        from verl.trainer.ppo.resume_check import LEDGER_KEY, StepCounterError

        if self.data_ledger.steps != self.global_steps:
            raise StepCounterError(
                f"saving step {self.global_steps}, but {self.data_ledger.steps} training steps ran: the step counter "
                "was changed outside a training step (verl #7933); this checkpoint would resume at the wrong step"
            )
        state: dict[str, Any] = {"global_steps": self.global_steps, "epoch": self._epoch, "gen_calls": self._gen_calls}
        if self.train_dataloader is not None:
            state["dataloader"] = self.train_dataloader.state_dict()
            state[LEDGER_KEY] = self.data_ledger.state_dict()
        if self.kl_ctrl_in_reward is not None:
            state["kl_coef"] = float(self.kl_ctrl_in_reward.value)
        return state

    def load_checkpoint(self, path: str | None = None, mode: str = "resume_path") -> int:
        """Resume from ``path`` (a complete checkpoint directory) or, when None, per ``trainer.resume_mode``;
        returns the restored global step (0 when starting fresh).

        Restores the workers (weights, optimizer, lr scheduler, RNG), the step count, the data loader position,
        the generation counter and the KL coefficient. The whole ``data.pt`` dict is kept in
        :attr:`resumed_state` for callers that saved their own ``extra_state``. A checkpoint of another model
        (algorithm, roles, LoRA rank) raises :class:`~verl.checkpoint.identity.CheckpointMismatchError` before
        anything loads; an explicit ``path`` is checked as ``mode`` (``resume_path``: named by the user, an algorithm
        change only warns; ``auto``: found by the caller under its root).
        """
        from verl.checkpoint.checkpoint_manager import safe_torch_load
        from verl.checkpoint.identity import check_resume_identity
        from verl.checkpoint.layout import require_intact, resolve_resume_path

        if path is None:
            # auto: the newest complete checkpoint whose files match their checksums (bad ones are warned about)
            path = resolve_resume_path(self.config.trainer, self.checkpoint_dir, identity=self.identity)
            if path is None:
                return 0
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
        state = safe_torch_load(data_file, "the driver's training state (step, data position, KL coefficient)")
        if self.train_dataloader is not None and "dataloader" in state:
            # before the weights: a data position this run cannot continue is one line, not a traceback
            try:
                self.train_dataloader.load_state_dict(state["dataloader"])
            except ValueError as err:
                from verl.checkpoint.identity import CheckpointMismatchError

                raise CheckpointMismatchError(
                    f"refusing to resume checkpoint {path}: {err} (data.train_batch_size / data.* of this run differ "
                    f"from the run in {os.path.dirname(os.path.normpath(path))}); use that run's data keys, or set "
                    "trainer.experiment_name to a new name, or start over with trainer.resume_mode=disable "
                    "trainer.overwrite_checkpoints=true (deletes its checkpoints)"
                ) from None
        self._verify_resume(state, path)
        self.actor_rollout_wg.load_checkpoint(os.path.join(path, "actor"))
        if self.use_critic:
            self.critic_wg.load_checkpoint(os.path.join(path, "critic"))
        self.global_steps = int(state["global_steps"])
        self._epoch = int(state.get("epoch", 0))
        self._gen_calls = int(state.get("gen_calls", self._gen_calls))
        if self.kl_ctrl_in_reward is not None and "kl_coef" in state:
            self.kl_ctrl_in_reward.value = state["kl_coef"]
        self.resumed_state = state
        self.resumed_from = path
        # said before the first step, so a run that continues is never mistaken for one that started over
        message = f"resumed from {path} at step {self.global_steps} (epoch {self._epoch})"
        logger.info(message)
        print(f"[verl] {message}", flush=True)
        return self.global_steps

    def _verify_resume(self, state: dict[str, Any], path: str) -> None:
        """Restore the data ledger and check that the resume continues the step counter and the data order
        (:func:`~verl.trainer.ppo.resume_check.verify_resume`; ``trainer.verify_resume=false``: not checked)."""
        from verl.trainer.ppo.resume_check import LEDGER_KEY, verify_resume

        ledger = state.get(LEDGER_KEY)
        if ledger is None or self.train_dataloader is None:
            if self.train_dataloader is not None:
                logger.warning(
                    "checkpoint %s has no data ledger (written by an older version): resume not verified", path
                )
            self.data_ledger.steps = int(state["global_steps"])
            return
        if self.config.trainer.verify_resume:
            verify_resume(state, self.train_dataloader, path, self.ledger_batches_per_step())
        self.data_ledger.load_state_dict(ledger)
        self.data_ledger.steps = int(state["global_steps"])  # (equal when verified) the next step is this + 1

    def export_hf(self, target_dir: str) -> str:
        """Export the actor of the newest checkpoint as a Hugging Face directory (LoRA merged)."""
        from verl.model_merger import merge_checkpoint

        step_dir = self.step_dir(self.global_steps)
        if not os.path.isdir(step_dir):
            step_dir = self.save_checkpoint()
        merge_checkpoint(os.path.join(step_dir, "actor"), target_dir)
        return target_dir
