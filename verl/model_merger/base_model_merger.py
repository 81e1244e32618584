"""Turn a training checkpoint into a Hugging Face model directory that ``from_pretrained`` loads.

Accepted inputs (``local_dir``):

- an actor/critic role dir ``global_step_N/actor``: the per-rank shards ``model_world_size_W_rank_R.safetensors``
  of any world size are reassembled (they win over full weights in ``huggingface/``, which a save holds only with
  ``hf_model`` in ``save_contents``), named as the transformers model in ``huggingface/config.json`` names them;
- a LoRA run's role dir: the shards hold base and adapter weights, merged here (``merge_lora=True``: ``W + (alpha
  / r) B A``) or written as the base weights with the adapter (``lora_adapter/``) copied next to them;
- a bare LoRA adapter dir (``adapter_model.safetensors`` + ``adapter_config.json``), whose base model is
  ``base_model_name_or_path`` from the adapter config or the ``base_model_path`` argument;
- a plain Hugging Face dir (``config.json`` + weights), e.g. to change its dtype.

The target directory is written atomically: it appears complete or not at all, and an existing one is only
replaced once the new one is fully written.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import torch

from verl.checkpoint.sharded_state import has_shards, hf_weights_state_dict, read_full_state_dict
from verl.models.log_z_head import without_training_only
from verl.utils.fs import atomic_directory

__all__ = ["DTYPES", "load_full_state_dict", "merge_checkpoint"]  # load_full_state_dict re-exported

HF_SUBDIR = "huggingface"
LORA_SUBDIR = "lora_adapter"
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def load_full_state_dict(local_dir: str, merge_lora: bool = True) -> dict[str, torch.Tensor] | None:
    """The full weights of a role dir under transformers names, or None when it holds none.

    From the rank shards when present (a wrapper's ``weights_prefix`` removed; LoRA adapters merged, or dropped
    when ``merge_lora`` is false), else from the full weights in ``huggingface/`` (or the dir itself)."""
    if has_shards(local_dir, "model"):
        state, meta = read_full_state_dict(local_dir, "model")
        # a head the loss trained beside the policy (FlowRL's log Z) is not part of the model
        state = dict(without_training_only(state.items()))
        lora = meta.get("lora")
        if lora:
            from verl.models.lora import merged_state_dict

            state = merged_state_dict(state, float(lora["lora_alpha"]) / float(lora["r"]) if merge_lora else 0.0)
        prefix = meta.get("weights_prefix", "")
        if prefix:
            outside = sorted(k for k in state if not k.startswith(prefix))
            if outside:
                raise ValueError(
                    f"{local_dir}: weights {outside[:5]} lie outside the wrapped transformers model (prefix "
                    f"{prefix!r}); a Hugging Face directory cannot hold them"
                )
            state = {k[len(prefix) :]: v for k, v in state.items()}
        return state
    hf_dir = os.path.join(local_dir, HF_SUBDIR)
    return hf_weights_state_dict(hf_dir if os.path.isdir(hf_dir) else local_dir)


def _parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def _model_class(config: Any) -> Any:
    import transformers

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:  # a config saved without ``architectures``
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    raise ValueError(
        f"cannot tell which model class {type(config).__name__} describes: its config has no architectures"
    )


def _build_model(config_dir: str, state_dict: dict[str, torch.Tensor]) -> torch.nn.Module:
    """Instantiate the config's architecture with exactly ``state_dict`` (missing/unexpected keys are errors)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(config_dir)
    floating = [t.dtype for t in state_dict.values() if t.is_floating_point()]
    load_dtype = floating[0] if floating else torch.float32
    cls = _model_class(config)
    model, info = cls.from_pretrained(
        None, config=config, state_dict=state_dict, dtype=load_dtype, output_loading_info=True
    )
    ties = getattr(model, "all_tied_weights_keys", None) or {}
    missing = [k for k in info.get("missing_keys", []) if k not in ties]
    unexpected = list(info.get("unexpected_keys", []))
    mismatched = list(info.get("mismatched_keys", []))
    if missing or unexpected or mismatched:
        raise ValueError(
            f"checkpoint weights do not match {config_dir}/config.json ({cls.__name__}): missing {missing[:8]}, "
            f"unexpected {unexpected[:8]}, shape mismatches {mismatched[:8]}"
        )
    return model


def _copy_side_files(src_dir: str | None, dst_dir: str) -> None:
    """Copy tokenizer/generation files (everything but weights and config.json) not already in ``dst_dir``."""
    if not src_dir or not os.path.isdir(src_dir):
        return
    for name in os.listdir(src_dir):
        src = os.path.join(src_dir, name)
        if (
            not os.path.isfile(src)
            or name == "config.json"
            or name.endswith(_WEIGHT_SUFFIXES)
            or name in _WEIGHT_INDEXES
            or name.startswith("adapter_")
            or os.path.exists(os.path.join(dst_dir, name))
        ):
            continue
        shutil.copy2(src, os.path.join(dst_dir, name))


def _read_adapter_base(adapter_dir: str, base_model_path: str | None) -> str:
    cfg_path = os.path.join(adapter_dir, "adapter_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        base = base_model_path or json.load(f).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{cfg_path} has no base_model_name_or_path; pass base_model_path / --base_model")
    if not os.path.isdir(base):
        from verl.models.hub import ModelPathError
        from verl.models.loader import resolve_model_path

        try:  # a hub id or bundled name: from the cache or downloaded once
            return resolve_model_path(base)
        except ModelPathError as e:
            raise ModelPathError(f"base model of adapter {adapter_dir} (or pass --base_model): {e}") from None
    return base


def merge_checkpoint(
    local_dir: str,
    target_dir: str,
    dtype: str | torch.dtype | None = None,
    merge_lora: bool = True,
    base_model_path: str | None = None,
) -> str:
    """Write the model in ``local_dir`` (see the module docstring) to ``target_dir`` as a Hugging Face dir.

    Args:
        local_dir: ``global_step_N/actor`` (or critic), a LoRA adapter dir, or a Hugging Face dir.
        target_dir: output directory (replaced atomically if it exists).
        dtype: ``bfloat16`` | ``float16`` | ``float32`` (or a torch dtype); None keeps the stored dtype.
        merge_lora: merge a LoRA adapter into the weights (``merge_and_unload``); if False the base weights are
            written and the adapter is copied to ``<target_dir>/lora_adapter``.
        base_model_path: base model dir for LoRA, overriding the adapter config's ``base_model_name_or_path``.

    Returns:
        ``target_dir``.
    """
    torch_dtype = _parse_dtype(dtype)
    if not os.path.isdir(local_dir):
        raise FileNotFoundError(f"checkpoint directory {local_dir} does not exist")
    if os.path.abspath(local_dir) == os.path.abspath(target_dir):
        raise ValueError(f"target_dir must differ from local_dir ({local_dir})")

    # The adapter may sit in the dir itself, in lora_adapter/, or in huggingface/ (a PEFT save_pretrained there).
    adapter_dir = next(
        (
            d
            for d in (local_dir, os.path.join(local_dir, LORA_SUBDIR), os.path.join(local_dir, HF_SUBDIR))
            if os.path.isfile(os.path.join(d, "adapter_config.json"))
        ),
        None,
    )
    hf_dir = next(
        (d for d in (os.path.join(local_dir, HF_SUBDIR), local_dir) if os.path.isfile(os.path.join(d, "config.json"))),
        None,
    )
    if hf_dir is None and adapter_dir is None:
        raise FileNotFoundError(
            f"{local_dir} is not a checkpoint: expected {os.path.join(local_dir, HF_SUBDIR, 'config.json')} "
            "(written by rank 0 at save), or adapter_config.json for a LoRA adapter"
        )
    from_shards = has_shards(local_dir, "model")
    state_dict = load_full_state_dict(local_dir, merge_lora) if hf_dir is not None else None
    if hf_dir is not None and state_dict is not None:
        config_dir = hf_dir
    elif adapter_dir is not None:  # adapter only: the base weights come from the adapter's base model
        config_dir = _read_adapter_base(adapter_dir, base_model_path)
        state_dict = hf_weights_state_dict(config_dir)
    else:
        config_dir = hf_dir or local_dir
    side_dirs = [d for d in (adapter_dir, os.path.join(local_dir, HF_SUBDIR), config_dir) if d is not None]
    if state_dict is None:
        raise FileNotFoundError(
            f"no weights found for {local_dir}: expected model_world_size_W_rank_R.safetensors shards, or "
            f"model.safetensors (or its index) in {config_dir}"
        )

    model = _build_model(config_dir, state_dict)
    del state_dict
    if adapter_dir is not None and merge_lora and not from_shards:  # shards come merged already
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    if torch_dtype is not None:
        model = model.to(torch_dtype)
    model.config.dtype = model.dtype if torch_dtype is None else torch_dtype

    with atomic_directory(target_dir) as tmp:
        model.save_pretrained(tmp)
        for d in side_dirs:
            _copy_side_files(d, tmp)
        if adapter_dir is not None and not merge_lora:
            shutil.copytree(adapter_dir, os.path.join(tmp, LORA_SUBDIR))
    return target_dir
