"""LoRA adapters (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models") through PEFT: wrap a
causal LM, and turn a PEFT model's full state dict into plain merged weights or back from a saved adapter.

A LoRA layer computes ``W x + (alpha / r) * B A x`` with the frozen base weight ``W`` and the trained low-rank
``A [r, in]``, ``B [out, r]``; merging writes ``W + (alpha / r) * B @ A`` into a plain weight.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import torch

__all__ = [
    "ADAPTER_NAME",
    "ADAPTER_PATH_KEY",
    "adapter_path_problem",
    "adapter_to_model_keys",
    "apply_lora",
    "build_lora",
    "lora_enabled",
    "merged_state_dict",
]

ADAPTER_PATH_KEY = "actor_rollout_ref.model.lora_adapter_path"
_ADAPTER_CONFIG = "adapter_config.json"
_ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")

ADAPTER_NAME = "default"
_PEFT_PREFIX = "base_model.model."
_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<part>A|B)\.(?:(?P<adapter>[^.]+)\.)?weight$")


def apply_lora(
    module: torch.nn.Module,
    lora_rank: int,
    lora_alpha: int = 16,
    target_modules: str | list[str] | None = "all-linear",
    exclude_modules: str | list[str] | None = None,
) -> torch.nn.Module:
    """``module`` wrapped by PEFT with LoRA adapters of rank ``lora_rank`` on ``target_modules`` (``all-linear``
    or a list of module names; None: PEFT's default modules for the model's architecture); only the adapters are
    trainable. On a vision-language model the vision encoder gets no adapters (its modules are excluded): LoRA
    adapts the language model only. ``exclude_modules`` (``model.exclude_modules``: a regex over full module names,
    or a list of names) leaves more modules out; when given it replaces the vision-encoder default."""
    from peft import LoraConfig, TaskType, get_peft_model

    from verl.models.vlm import is_vision_language_model

    if lora_rank < 1:
        raise ValueError(f"model.lora_rank must be >= 1 to apply LoRA, got {lora_rank}")
    config = LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=int(lora_rank),
        lora_alpha=int(lora_alpha),
        target_modules=target_modules
        if target_modules is None or isinstance(target_modules, str)
        else list(target_modules),
        # PEFT matches a string exclude_modules as a regex over the full module name
        exclude_modules=_exclude(exclude_modules, is_vision_language_model(module)),
        bias="none",
    )
    return get_peft_model(module, config)


def lora_enabled(model_cfg: Any) -> bool:
    """Whether the policy trains through LoRA adapters: fresh ones (``lora_rank > 0``) or saved ones
    (``lora_adapter_path``)."""
    return int(model_cfg.lora_rank) > 0 or model_cfg.lora_adapter_path is not None


def adapter_path_problem(path: str, lora_rank: int, key: str = ADAPTER_PATH_KEY) -> str | None:
    """One line naming ``key`` and what is wrong with the saved PEFT adapter at ``path`` (a directory holding
    ``adapter_config.json`` of a LoRA adapter and ``adapter_model.safetensors`` or ``adapter_model.bin``), or None.
    A ``lora_rank > 0`` given beside it must equal the adapter's rank ``r`` (the adapter's own rank, alpha and
    target modules are what is trained)."""
    if not os.path.isdir(path):
        return f"{key}={path}: no such directory (a saved PEFT adapter: {_ADAPTER_CONFIG} + {_ADAPTER_WEIGHTS[0]})"
    config_file = os.path.join(path, _ADAPTER_CONFIG)
    if not os.path.isfile(config_file):
        return f"{key}={path}: missing {_ADAPTER_CONFIG} (save the adapter with PeftModel.save_pretrained)"
    if not any(os.path.isfile(os.path.join(path, name)) for name in _ADAPTER_WEIGHTS):
        return f"{key}={path}: missing {' or '.join(_ADAPTER_WEIGHTS)} (the adapter's weights)"
    try:
        with open(config_file) as f:
            saved = json.load(f)
    except (OSError, ValueError) as exc:
        return f"{key}={path}: {_ADAPTER_CONFIG} is not readable JSON ({exc})"
    if str(saved.get("peft_type", "")).upper() != "LORA":
        return f"{key}={path}: {_ADAPTER_CONFIG} has peft_type={saved.get('peft_type')!r}; only LORA adapters load"
    if lora_rank > 0 and int(saved.get("r", 0)) != lora_rank:
        return (
            f"{key}={path}: the adapter has rank r={saved.get('r')} but actor_rollout_ref.model.lora_rank="
            f"{lora_rank}; drop lora_rank (the adapter's rank is used) or set it to {saved.get('r')}"
        )
    return None


def build_lora(module: torch.nn.Module, model_cfg: Any) -> torch.nn.Module:
    """``module`` with the policy's LoRA adapters (``model_cfg`` is ``actor_rollout_ref.model``): the saved
    adapter of ``lora_adapter_path`` loaded trainable (its own rank, alpha and target modules, as PEFT saved them),
    else fresh adapters of ``lora_rank`` / ``lora_alpha`` / ``target_modules`` (:func:`apply_lora`)."""
    path = model_cfg.lora_adapter_path
    if path is None:
        return apply_lora(
            module,
            int(model_cfg.lora_rank),
            int(model_cfg.lora_alpha),
            model_cfg.target_modules,
            exclude_modules=model_cfg.exclude_modules,
        )
    from peft import PeftModel, TaskType

    from verl.utils.fs import copy_to_local

    local = copy_to_local(os.path.expanduser(str(path)), use_shm=bool(model_cfg.use_shm))
    problem = adapter_path_problem(local, int(model_cfg.lora_rank))
    if problem:
        raise ValueError(problem)
    peft_model = PeftModel.from_pretrained(module, local, adapter_name=ADAPTER_NAME, is_trainable=True)
    peft_model.peft_config[ADAPTER_NAME].task_type = TaskType.CAUSAL_LM
    return peft_model


def _exclude(exclude_modules: str | list[str] | None, vision_language: bool) -> str | list[str] | None:
    """PEFT's ``exclude_modules``: the user's, else the vision encoder of a vision-language model, else none."""
    if exclude_modules is not None:
        return exclude_modules if isinstance(exclude_modules, str) else list(exclude_modules)
    return r".*\bvisual\b.*" if vision_language else None


def adapter_to_model_keys(adapter_state: dict[str, torch.Tensor], adapter_name: str = ADAPTER_NAME) -> dict[str, Any]:
    """Keys of a saved adapter (PEFT drops the adapter name: ``...lora_A.weight``) -> the live PEFT model's keys
    (``...lora_A.default.weight``)."""
    out: dict[str, Any] = {}
    for key, value in adapter_state.items():
        m = _LORA_KEY.match(key)
        out[
            f"{m.group('module')}.lora_{m.group('part')}.{adapter_name}.weight" if m and not m.group("adapter") else key
        ] = value
    return out


def merged_state_dict(peft_state: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """Plain transformers weights from a PEFT model's full state dict: every ``base_layer.weight`` plus
    ``scaling * lora_B @ lora_A`` (``scaling = lora_alpha / lora_rank``), the ``base_model.model.`` prefix and the
    ``.base_layer`` infix removed, adapter tensors dropped."""
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    merged: dict[str, torch.Tensor] = {}
    for key, value in peft_state.items():
        m = _LORA_KEY.match(key)
        if m:
            pairs.setdefault(m.group("module"), {})[m.group("part")] = value
            continue
        if ".lora_" in key:
            continue  # dropout / embedding adapters carry no weight to merge here
        merged[key] = value
    for module, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise ValueError(f"LoRA module {module!r} lacks its {'A' if 'A' not in ab else 'B'} matrix")
        base_key = f"{module}.base_layer.weight"
        if base_key not in merged:
            raise ValueError(f"LoRA module {module!r} has no base weight {base_key!r}")
        base = merged[base_key]
        delta = (ab["B"].float() @ ab["A"].float()) * float(scaling)
        merged[base_key] = (base.float() + delta).to(base.dtype)
    plain: dict[str, torch.Tensor] = {}
    for key, value in merged.items():
        name = key[len(_PEFT_PREFIX) :] if key.startswith(_PEFT_PREFIX) else key
        plain[name.replace(".base_layer.", ".")] = value
    return plain
