"""Upstream verl v0.9 launch lines for engines this project does not have: refused before composing, in one line.

Upstream verl runs its trainers on several model engines (``model_engine=dp|megatron|veomni|torchtitan``,
``actor.strategy=megatron``, the ``*_megatron_trainer`` config files, the Automodel SFT engine), rollout engines
(``rollout.name=vllm|sglang|trtllm``) and devices (Ascend NPU). Here the workers are FSDP2 (``model_engine=dp``,
``fsdp``, ``fsdp2``) and the rollout engines are vLLM and the built-in ``hf`` engine. A command line that asks for
anything else gets exactly one line, naming the engine and what to use instead, before any key is looked at (so
never a list of the engine's unknown keys).
"""

from __future__ import annotations

import re
from typing import Any

from verl.trainer.config.validation import ConfigError

# model_engine values (upstream's config group verl/trainer/config/model_engine/) that select our FSDP2 workers
FSDP_MODEL_ENGINES = ("dp", "fsdp", "fsdp2")

# engine name -> (what it is, what to use instead)
_MODEL_ENGINES: dict[str, str] = {
    "megatron": "Megatron-LM",
    "mcore": "Megatron-LM",
    "mlite": "Megatron-LM (lite)",
    "veomni": "VeOmni",
    "torchtitan": "TorchTitan",
    "automodel": "NeMo Automodel",
}
_USE_FSDP = "use model_engine=fsdp (FSDP2 workers; Ulysses sequence parallelism via fsdp_config)"
_ROLLOUT_ENGINES: dict[str, str] = {"sglang": "SGLang", "trtllm": "TensorRT-LLM", "tensorrt_llm": "TensorRT-LLM"}
_USE_VLLM = "use vllm or hf"


def _engine_in(text: str) -> str | None:
    """The model-engine name inside a value or key part (``megatron_actor`` -> ``megatron``), if any."""
    low = text.lower()
    for name in _MODEL_ENGINES:
        if re.search(rf"(^|[^a-z]){name}([^a-z]|$)", low):
            return name
    return None


def refusal_for_override(text: str) -> str | None:
    """The one-line refusal of one command-line override that asks for an engine or device we do not have."""
    body = text.strip().lstrip("+~")
    key, _, raw = body.partition("=")
    key = key.strip()
    sval = raw.strip().strip("'\"")
    group = key.split("@", 1)[0]
    if key in ("model_engine", "engine") or group in ("actor", "ref", "critic", "model_engine", "engine"):
        name = _engine_in(sval)
        if name:
            return f"{text}: {_MODEL_ENGINES[name]} is not an engine here; {_USE_FSDP}"
        if key == "model_engine" and sval and sval not in FSDP_MODEL_ENGINES:
            return f"{text}: model engine {sval!r} is not an engine here; {_USE_FSDP}"
    if key.endswith(".strategy") and _engine_in(sval):
        name = _engine_in(sval)
        return f"{text}: {_MODEL_ENGINES[name]} is not an engine here; use {key}=fsdp (FSDP2)"
    if key.endswith("rollout.name") and sval in _ROLLOUT_ENGINES:
        return f"{text}: {_ROLLOUT_ENGINES[sval]} is not an engine here; {_USE_VLLM}"
    parts = key.split(".")
    if "turbo_config" in parts or (key.endswith(".strategy") and sval == "fsdp_turbo"):
        return f"{key}: FSDP Turbo is not an engine here; use strategy fsdp (FSDP2, per-layer sharding of the model)"
    for part in parts:
        if part in ("megatron", "veomni", "torchtitan", "automodel", "mcore"):
            return f"{key}: {_MODEL_ENGINES[part]} settings: {_MODEL_ENGINES[part]} is not an engine here; {_USE_FSDP}"
    # rollout.engine_kwargs.sglang (the section, or a key inside it)
    eng = next((e for e in _ROLLOUT_ENGINES if f".engine_kwargs.{e}." in f"{key}."), None)
    if eng is not None:
        return f"{key}: {_ROLLOUT_ENGINES[eng]} is not an engine here; {_USE_VLLM} (engine_kwargs.vllm)"
    if key.endswith("trainer.device") and sval == "npu":
        return f"{text}: Ascend NPU is not a device here; use trainer.device=cuda (or cpu)"
    return None


def last_override_of_each_key(tokens: list[str]) -> list[str]:
    """The overrides that decide a value: of several for one key (``+`` / ``~`` prefixes aside), the last, in the
    order given."""
    last = {_override_key(text): i for i, text in enumerate(tokens)}
    return [text for i, text in enumerate(tokens) if last[_override_key(text)] == i]


def _override_key(text: str) -> str:
    return text.strip().lstrip("+~").partition("=")[0].strip()


def refusal_for_config_name(name: str | None) -> str | None:
    """The one-line refusal of an upstream config file name of another engine (``ppo_megatron_trainer``, ...)."""
    if not name:
        return None
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name
    engine = _engine_in(stem)
    if engine:
        return f"--config-name {stem}: {_MODEL_ENGINES[engine]} is not an engine here; {_USE_FSDP} (ppo_trainer)"
    return None


def refuse_engines_in_config(cfg: Any) -> None:
    """Raise the same one-line :class:`ConfigError` as :func:`refuse_other_engines` when the composed config (a
    recipe's YAML, the command line already applied) still names a rollout engine or device we do not have."""
    from omegaconf import OmegaConf

    for key in ("actor_rollout_ref.rollout.name", "reward_model.rollout.name", "trainer.device"):
        value = OmegaConf.select(cfg, key)  # None where the config has no such key (an SFT config)
        line = refusal_for_override(f"{key}={value}") if isinstance(value, str) else None
        if line:
            raise ConfigError(f"{line} (from the config file; override it on the command line)")


def refuse_other_engines(tokens: list[str], config_name: str | None = None) -> None:
    """Raise a one-line :class:`ConfigError` when the command line asks for an engine or device we do not have.

    ``tokens``: the ``key=value`` overrides as typed; ``config_name``: the ``--config-name`` given, if any. Only the
    last override of a key counts, as in Hydra (``rollout.name=sglang ... rollout.name=vllm`` asks for vLLM). The
    first refusal found is the message (the others would name the same engine).
    """
    line = refusal_for_config_name(config_name)
    for text in last_override_of_each_key(tokens):
        if line:
            break
        line = refusal_for_override(text)
    if line:
        raise ConfigError(line)
