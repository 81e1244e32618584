"""Upstream verl v0.9's ``verl.trainer.ppo.v1.trainer_base``: the base class of the V1 trainers, and the trainer of
each ``trainer.v1.trainer_mode``.

Here the V1 modes run this project's trainers (:mod:`verl.trainer.config.v1_modes` maps ``trainer.use_v1`` /
``trainer.v1.*`` onto ``async_training``; :func:`verl.trainer.ppo.runner.async_trainer_cls` picks the class), and
every one of them derives from the PPO driver, so :data:`PPOTrainer` names that driver. Upstream's hook methods
(``on_init_end``, ``on_step_end``, ...) and its trainer registry for custom modes are not provided: a mode other
than the three below is refused when the config loads.
"""

from __future__ import annotations

from verl.trainer.ppo.ray_trainer import RayPPOTrainer

__all__ = ["TRAINER_MODES", "PPOTrainer", "get_trainer_cls"]

#: upstream's base class of the V1 trainers: the PPO driver, which the asynchronous trainers here subclass
PPOTrainer = RayPPOTrainer

#: the modes of ``trainer.v1.trainer_mode`` -> the module (under ``verl.trainer.ppo.v1``) and name of its class
TRAINER_MODES: dict[str, tuple[str, str]] = {
    "sync": ("trainer_sync", "PPOTrainerSync"),
    "colocate_async": ("trainer_colocate_async", "PPOTrainerColocateAsync"),
    "separate_async": ("trainer_separate_async", "PPOTrainerSeparateAsync"),
}


def get_trainer_cls(name: str) -> type[RayPPOTrainer]:
    """The trainer class that runs ``trainer.v1.trainer_mode=name`` with the mode's default settings (upstream's
    ``get_trainer_cls``): ``sync`` the PPO driver, ``colocate_async`` the one-step-off-policy trainer
    (``num_warmup_batches=1``; other counts run the fully asynchronous one), ``separate_async`` the fully
    asynchronous trainer.

    Raises:
        ValueError: ``name`` is not one of the three modes.
    """
    import importlib

    if name not in TRAINER_MODES:
        raise ValueError(f"Unknown trainer {name!r}. Available trainers: {', '.join(sorted(TRAINER_MODES))}.")
    module, cls = TRAINER_MODES[name]
    return getattr(importlib.import_module(f"verl.trainer.ppo.v1.{module}"), cls)
