"""LoRA adapters (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models") through PEFT: wrap a
causal LM, and turn a PEFT model's full state dict into plain merged weights or back from a saved adapter.

A LoRA layer computes ``W x + (alpha / r) * B A x`` with the frozen base weight ``W`` and the trained low-rank
``A [r, in]``, ``B [out, r]``; merging writes ``W + (alpha / r) * B @ A`` into a plain weight.
"""

from __future__ import annotations

import re
from typing import Any

import torch

__all__ = ["ADAPTER_NAME", "adapter_to_model_keys", "apply_lora", "merged_state_dict"]

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
