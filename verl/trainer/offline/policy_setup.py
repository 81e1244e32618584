"""What an offline trainer (SFT, DPO, KTO, GKD) trains, built from its config before the loop starts: the
``model.external_lib`` import, the tokenizer, the policy module (fp32 master weights, LoRA adapters, gradient
checkpointing) and the run identity its checkpoints record.

:class:`~verl.trainer.offline.base.OfflineTrainer` calls these functions; the training loop itself (data order,
steps, evaluation, checkpoints, resume, export) stays in :mod:`verl.trainer.offline.base`.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from verl.checkpoint.checkpoint_manager import is_peft_model
from verl.models.loader import load_causal_lm, load_tokenizer
from verl.trainer.config.validation import ConfigError

__all__ = ["import_external_lib", "load_policy", "load_trainer_tokenizer", "run_identity"]


def import_external_lib(name: str | None) -> None:
    """Import ``model.external_lib`` (a module that registers custom architectures with transformers); an import
    error is a :class:`ConfigError` naming the key."""
    if not name:
        return
    try:
        importlib.import_module(str(name))
    except ImportError as e:
        raise ConfigError(f"model.external_lib: cannot import {name!r}: {e}") from e


def run_identity(algorithm: str, config: DictConfig, model: Any = None) -> dict[str, Any]:
    """The run identity (:func:`verl.checkpoint.identity.make_identity`) of training ``model`` (a module;
    default: ``config.model.path``, fingerprinted from its ``config.json`` and safetensors headers) with ``config``
    under ``algorithm`` (``sft``, ``dpo``...): the algorithm, the LoRA rank, the ``actor`` role's model fingerprint
    and ``data.train_batch_size``. Reads no weights."""
    from verl.checkpoint.identity import (
        make_identity,
        model_fingerprint_from_module,
        model_fingerprint_from_path,
    )
    from verl.models.loader import resolve_model_path

    mcfg = config.model
    if isinstance(model, torch.nn.Module):
        fingerprint = model_fingerprint_from_module(model.get_base_model() if is_peft_model(model) else model)
    else:
        override = OmegaConf.to_container(mcfg.override_config, resolve=True) if mcfg.get("override_config") else {}
        fingerprint = model_fingerprint_from_path(resolve_model_path(str(model or mcfg.path)), override)
    # the data position of a checkpoint is counted in steps of this batch size: another one resumes elsewhere
    settings = {"data.train_batch_size": config.data.train_batch_size}
    return make_identity(algorithm, algorithm, {"actor": fingerprint}, int(mcfg.lora_rank or 0), settings)


def load_trainer_tokenizer(config: DictConfig, model: Any, model_path: str | None) -> Any:
    """The tokenizer of ``model.tokenizer_path``, else of the model path (``model_path``, or the ``name_or_path`` of
    a given module's config when that is a directory), right-padded as the offline datasets expect."""
    path = config.model.tokenizer_path or model_path
    if path is None:
        name = getattr(getattr(model, "config", None), "name_or_path", None)
        if not name or not os.path.isdir(str(name)):
            raise ValueError("tokenizer=None needs a model path; pass tokenizer= when model is a torch module")
        path = str(name)
    return load_tokenizer(path, trust_remote_code=bool(config.model.trust_remote_code), padding_side="right")


def load_policy(config: DictConfig, model: Any) -> torch.nn.Module:
    """The trainable policy: ``model`` (a module, trained in place with its floating-point weights made fp32) or
    the causal LM at path ``model`` loaded in fp32 (compute dtype comes from autocast), with LoRA adapters when
    ``model.lora_rank > 0`` and gradient checkpointing when ``model.enable_gradient_checkpointing``; in train mode."""
    mcfg = config.model
    if isinstance(model, torch.nn.Module):
        module = model
        if any(p.is_floating_point() and p.dtype != torch.float32 for p in module.parameters()):
            module.float()  # master weights in fp32; compute dtype comes from autocast
    else:
        module = load_causal_lm(
            str(model),
            dtype=torch.float32,
            trust_remote_code=bool(mcfg.trust_remote_code),
            override_config=OmegaConf.to_container(mcfg.override_config),
        )
    lora_rank = int(mcfg.lora_rank or 0)
    if lora_rank > 0:
        from verl.models.lora import apply_lora

        module = apply_lora(module, lora_rank, mcfg.lora_alpha, mcfg.target_modules)
    if mcfg.enable_gradient_checkpointing and hasattr(module, "gradient_checkpointing_enable"):
        module.gradient_checkpointing_enable()
        if lora_rank > 0 and hasattr(module, "enable_input_require_grads"):
            # frozen embeddings: checkpointed blocks need an input that requires grad to backpropagate at all
            module.enable_input_require_grads()
    module.train()
    return module
