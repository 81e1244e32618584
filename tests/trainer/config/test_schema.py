"""The dataclass schema and ppo_trainer.yaml describe the same keys with the same defaults."""

from __future__ import annotations

import dataclasses
import typing
from importlib import resources
from typing import Any

import pytest
from omegaconf import OmegaConf

from verl.trainer.config.loader import load_config
from verl.trainer.config.schema import (
    ActorConfig,
    CriticConfig,
    KLControlConfig,
    PPOConfig,
    RolloutConfig,
    TrainerConfig,
    to_dataclass,
)


def _yaml_defaults() -> dict[str, Any]:
    text = resources.files("verl.trainer.config").joinpath("ppo_trainer.yaml").read_text()
    return OmegaConf.to_container(OmegaConf.create(text), resolve=False)


# Option maps handed verbatim to another program: their keys are its flag names (``cuda-memory-usage``), which
# cannot be dataclass fields. Their defaults are still compared with the YAML's (the next test).
PASS_THROUGH_MAPS = {
    "global_profiler.global_tool_config.nsys.controller_nsight_options",
    "global_profiler.global_tool_config.nsys.worker_nsight_options",
}


def _key_diff(section: dict[str, Any], cls: type, prefix: str = "") -> list[str]:
    """Keys present on one side only, as dotted paths, recursing into nested sections."""
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    diff = [f"only in YAML: {prefix}{k}" for k in section if k not in fields]
    diff += [f"only in {cls.__name__}: {prefix}{k}" for k in fields if k not in section]
    for name in fields:
        tp = hints[name]
        if name in section and dataclasses.is_dataclass(tp):
            if not isinstance(section[name], dict):
                diff.append(f"{prefix}{name}: a section in the schema but a value in the YAML")
            else:
                diff += _key_diff(section[name], tp, f"{prefix}{name}.")
        elif name in section and isinstance(section[name], dict) and section[name]:
            if f"{prefix}{name}" in PASS_THROUGH_MAPS:
                continue
            diff.append(f"{prefix}{name}: a non-empty mapping in the YAML but a free-form value in the schema")
    return diff


def test_yaml_and_dataclasses_have_exactly_the_same_keys() -> None:
    assert _key_diff(_yaml_defaults(), PPOConfig) == []


def test_dataclass_defaults_equal_the_resolved_yaml_defaults() -> None:
    yaml_values = OmegaConf.to_container(load_config(schema=None), resolve=True)
    assert dataclasses.asdict(PPOConfig()) == yaml_values


def test_to_dataclass_builds_typed_sections() -> None:
    cfg = load_config(["actor_rollout_ref.rollout.n=8", "+trainer.extra_note=hello"])
    typed = to_dataclass(cfg, PPOConfig)
    assert isinstance(typed.actor_rollout_ref.actor, ActorConfig)
    assert isinstance(typed.actor_rollout_ref.rollout, RolloutConfig)
    assert typed.actor_rollout_ref.rollout.n == 8
    assert typed.critic.rollout_n == 8  # interpolated from rollout.n
    assert typed.actor_rollout_ref.actor.optim.betas == [0.9, 0.999]
    # a +key is kept next to the fields and reads like one (custom losses and reward managers read their own keys)
    assert typed.trainer.extra_note == "hello" and typed.trainer.get("extra_note") == "hello"
    assert "extra_note" not in [f.name for f in dataclasses.fields(typed.trainer)]
    assert isinstance(typed.trainer, TrainerConfig)
    # a section converts on its own too
    critic = to_dataclass(cfg.critic, CriticConfig)
    assert critic.cliprange_value == 0.5


def test_sections_are_independent_instances() -> None:
    a, b = PPOConfig(), PPOConfig()
    a.trainer.logger.append("wandb")
    a.actor_rollout_ref.model.override_config["x"] = 1
    assert b.trainer.logger == ["console", "file", "tensorboard"]
    assert b.actor_rollout_ref.model.override_config == {}


@pytest.mark.parametrize(
    ("cls", "field_name", "choices"),
    [
        (KLControlConfig, "type", ("fixed", "adaptive")),
        (RolloutConfig, "name", ("auto", "hf", "vllm")),
        (TrainerConfig, "backend", ("auto", "local", "ray")),
        (TrainerConfig, "resume_mode", ("auto", "disable", "resume_path")),
    ],
)
def test_choices_are_literal_types(cls: type, field_name: str, choices: tuple[str, ...]) -> None:
    tp = typing.get_type_hints(cls)[field_name]
    assert typing.get_origin(tp) is typing.Literal
    assert typing.get_args(tp) == choices
