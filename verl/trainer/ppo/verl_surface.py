"""Upstream verl's names on the PPO driver, for recipes and callers ported from verl: :class:`VerlTrainerSurface`.

Upstream's ``RayPPOTrainer`` (``verl/trainer/ppo/ray_trainer.py``) holds its data loaders, step budget, worker groups
and checkpoint directory itself and has ``_create_dataloader``, ``_save_checkpoint``, ``_load_checkpoint`` and
``_balance_batch``. Here the driver holds parts (``data``, ``workers``, ``checkpoints``, ``report``, ``versions``);
this base class gives it upstream's names, each a one-line delegation to a part or to the driver's own method. It
holds no state: every attribute it names lives in a part.
"""

from __future__ import annotations

from typing import Any

from verl.algorithms.core_algos import get_policy_loss_fn
from verl.algorithms.registry import needs_groups
from verl.protocol import DataProto
from verl.trainer.ppo.driver_data import balance_batch

__all__ = ["VerlTrainerSurface"]


def _delegate(part: str, name: str, writable: bool = False) -> property:
    """A driver attribute that is ``<part>.<name>`` (read-only unless ``writable``)."""

    def get(self: Any) -> Any:
        return getattr(getattr(self, part), name)

    def put(self: Any, value: Any) -> None:
        setattr(getattr(self, part), name, value)

    return property(get, put if writable else None, doc=f"verl compatibility: ``self.{part}.{name}``")


class VerlTrainerSurface:
    """verl compatibility: upstream ``RayPPOTrainer``'s attributes and methods, delegated to the driver's parts."""

    # the parts, and the driver's own methods these names call (RayPPOTrainer defines them)
    data: Any
    checkpoints: Any
    report: Any
    workers: Any
    _create_dataloaders: Any
    save_checkpoint: Any
    load_checkpoint: Any

    # the data part (verl/trainer/ppo/driver_data.py); an asynchronous trainer sets total_training_steps
    train_dataset = _delegate("data", "train_dataset")
    val_dataset = _delegate("data", "val_dataset")
    train_dataloader = _delegate("data", "train_dataloader", writable=True)
    val_dataloader = _delegate("data", "val_dataloader", writable=True)
    total_training_steps = _delegate("data", "total_training_steps", writable=True)
    # the worker groups (verl/trainer/ppo/driver_workers.py)
    worker_groups = _delegate("workers", "groups")
    actor_rollout_wg = _delegate("workers", "actor")
    critic_wg = _delegate("workers", "critic")
    rm_wg = _delegate("workers", "rm")
    role_worker_mapping = _delegate("workers", "role_worker_mapping")
    resource_pool_manager = _delegate("workers", "resource_pool_manager")
    # checkpoints (verl/trainer/ppo/driver_checkpoint.py) and reporting (verl/trainer/ppo/driver_report.py)
    checkpoint_dir = _delegate("checkpoints", "checkpoint_dir")
    resumed_state = _delegate("checkpoints", "resumed_state")
    resumed_from = _delegate("checkpoints", "resumed_from")
    step_hooks = _delegate("report", "step_hooks")
    metrics_path = _delegate("report", "metrics_path")

    def _create_dataloader(
        self, train_dataset: Any = None, val_dataset: Any = None, collate_fn: Any = None, train_sampler: Any = None
    ) -> None:
        """Upstream's name and arguments: the given sources (each None keeps the one the driver holds), then the
        driver's ``_create_dataloaders`` (which the asynchronous trainers extend)."""
        given = {"train_dataset": train_dataset, "val_dataset": val_dataset, "collate_fn": collate_fn}
        given["train_sampler"] = train_sampler
        for name, value in given.items():
            if value is not None:
                setattr(self.data, name, value)
        self._create_dataloaders()

    def _balance_batch(self, batch: DataProto, metrics: dict[str, Any], logging_prefix: str = "global_seqlen") -> None:
        """Upstream's name: :func:`~verl.trainer.ppo.driver_data.balance_batch` over the actor group's ranks (whole
        ``uid`` groups per rank with ``actor.use_prefix_grouper``, as upstream's, and for a loss that centres over
        groups, ``gvpo``, as verl-recipe's GVPO trainer)."""
        actor = self.config.actor_rollout_ref.actor
        keep_groups = bool(actor.use_prefix_grouper) or needs_groups(get_policy_loss_fn(actor.policy_loss.loss_mode))
        balance_batch(batch, self.workers.actor.world_size, metrics, logging_prefix, keep_groups=keep_groups)

    def _save_checkpoint(self) -> str:
        """Upstream's name: the driver's ``save_checkpoint()`` of the current step."""
        return self.save_checkpoint()

    def _load_checkpoint(self) -> int:
        """Upstream's name: the driver's ``load_checkpoint()`` per ``trainer.resume_mode``; returns the step."""
        return self.load_checkpoint()
