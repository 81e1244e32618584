"""Upstream verl v0.9's V1 trainer module paths name the trainers that run each ``trainer.v1.trainer_mode``."""

from __future__ import annotations

import importlib

import pytest

from verl.trainer.config.loader import load_config
from verl.trainer.fully_async_policy.fully_async_trainer import FullyAsyncRayPPOTrainer
from verl.trainer.one_step_off_policy.ray_trainer import OneStepOffRayPPOTrainer
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.runner import async_trainer_cls


@pytest.mark.parametrize(
    ("mode", "module", "name", "cls"),
    [
        ("sync", "trainer_sync", "PPOTrainerSync", RayPPOTrainer),
        ("colocate_async", "trainer_colocate_async", "PPOTrainerColocateAsync", OneStepOffRayPPOTrainer),
        ("separate_async", "trainer_separate_async", "PPOTrainerSeparateAsync", FullyAsyncRayPPOTrainer),
    ],
)
def test_each_mode_module_names_the_class_the_runner_runs(mode: str, module: str, name: str, cls: type) -> None:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer, get_trainer_cls

    exported = getattr(importlib.import_module(f"verl.trainer.ppo.v1.{module}"), name)
    assert exported is cls is get_trainer_cls(mode) and issubclass(cls, PPOTrainer)
    overrides = ["trainer.use_v1=true", f"trainer.v1.trainer_mode={mode}"]
    if mode == "separate_async":
        overrides += ["trainer.v1.separate_async.num_warmup_batches=1"]
    assert (async_trainer_cls(load_config(overrides)) or RayPPOTrainer) is cls


def test_unknown_mode_and_missing_modules_say_so() -> None:
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    with pytest.raises(ValueError, match="Available trainers: colocate_async, separate_async, sync"):
        get_trainer_cls("fancy")
    for module in ("replay_buffer", "agent_loop_tq"):
        with pytest.raises(ImportError, match="is not provided here"):
            importlib.import_module(f"verl.trainer.ppo.v1.{module}")
