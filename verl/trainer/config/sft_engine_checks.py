"""Upstream verl v0.9's SFT config (``sft_trainer_engine.yaml``) onto this project's one SFT trainer.

Three jobs, one per function:

* :func:`refuse_engine_group`: the config-group choices of upstream's scripts (``engine=megatron``,
  ``optim=automodel``, ``model=hf_model``, ...): the FSDP ones are this config already, the others are refused in one
  line naming the engine and what to use instead.
* :func:`engine_config_errors` / :func:`engine_config_warnings`: each value that cannot be honoured, one line naming
  the key, why, and what to use instead.
* :func:`to_sft_overrides`: the ``sft_trainer.yaml`` keys (dotted) that train what the v0.9 config asks.

Upstream's v0.9 SFT loss is the token mean over the whole global batch (``verl/workers/utils/losses.py::sft_loss``:
``-sum(log p * loss_mask) / batch_num_tokens * dp_size``), which is also this trainer's loss; micro-batching,
sequence parallelism and padding-free packing therefore change memory and speed, never the gradient, and the keys
that only choose them (``use_dynamic_bsz``, ``ulysses_sequence_parallel_size``, ``use_remove_padding``,
``pad_mode``, ``use_torch_compile``) are accepted with what they mean here (``use_remove_padding`` packs each
micro-batch's valid tokens, :func:`verl.workers.actor.response_forward.next_token_logprobs_at`).
``model.use_fused_kernels`` (and ``model.use_liger``, whose loss kernel is a fused linear cross-entropy) runs the
loss through the chunked LM head (``verl/workers/actor/fused_head.py``: no ``[batch, seq, vocab]`` logits, same
loss and gradient); both ``fused_kernel_options.impl_backend`` values select that plain-torch head.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from verl.trainer.config.remote_code_checks import remote_code_errors
from verl.trainer.config.validation import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig

# Config groups of upstream's sft_trainer_engine.yaml and the option this config already is.
FSDP_GROUPS = {"model": "hf_model", "engine": "fsdp", "optim": "fsdp", "profiler": "profiler"}

_OTHER_ENGINES = {
    "megatron": "Megatron-LM",
    "mlite": "Megatron Lite",
    "automodel": "NeMo Automodel",
    "veomni": "VeOmni",
    "torchtitan": "TorchTitan",
}

_GROUP_RE = re.compile(r"^(model|engine|optim|profiler)(@[\w.]+)?=([\w-]+)$")


def refuse_engine_group(arg: str) -> bool:
    """Whether ``arg`` is a config-group choice of this config (``engine=fsdp``, ``optim@optim=fsdp``, ...).

    The FSDP choices are what ``sft_trainer_engine`` is composed of, so they change nothing (True: drop the argument).

    Raises:
        ConfigError: one line for another engine's group (``engine=megatron``, ``optim=automodel``, ...) or an
            option upstream does not have.
    """
    m = _GROUP_RE.match(arg)
    if m is None:
        return False
    group, option = m.group(1), m.group(3)
    if option == FSDP_GROUPS[group]:
        return True
    if option in _OTHER_ENGINES:
        raise ConfigError(
            f"{arg}: the {_OTHER_ENGINES[option]} engine is not available here; this project trains SFT with FSDP2: "
            f"use engine=fsdp optim=fsdp (the default; keys in docs/offline_trainers.md)"
        )
    raise ConfigError(f"{arg}: no {group} option {option!r}; the {group} group has {FSDP_GROUPS[group]} only here")


def _is_set(value: Any) -> bool:
    """Whether a refused switch is on: true, a non-zero number, a non-empty string, list or mapping."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, (int, float, str)):
        return bool(value)
    return len(value) > 0


def _refused(cfg: DictConfig) -> dict[str, tuple[Any, str]]:
    """``key -> (value, why and what to use instead)`` of the switches refused when set (truthy)."""
    m, e, d, t = cfg.model, cfg.engine, cfg.data, cfg.trainer
    offload = "CPU offload is not available for SFT; remove it (or train LoRA: model.lora_rank=32)"
    entropy = "SFT computes no entropy (upstream's SFT loss does not either); remove it"
    return {
        "model.hf_config_path": (m.hf_config_path, "the HF config is read from model.path; remove it"),
        "model.use_shm": (m.use_shm, "the model is read in place, not copied to shared memory; remove it"),
        "model.custom_chat_template": (m.custom_chat_template, "the tokenizer's own chat template is used; put the "
                                       "template in the tokenizer's tokenizer_config.json instead"),
        "model.enable_activation_offload": (m.enable_activation_offload, "activation offload is not available; use "
                                            "model.enable_gradient_checkpointing=true"),
        "model.exclude_modules": (m.exclude_modules, "list the wanted modules in model.target_modules instead"),
        "model.lora_adapter_path": (m.lora_adapter_path, "adapters start from zero here; merge the adapter into "
                                    "the base model and train that"),
        "model.tiled_mlp.enabled": (m.tiled_mlp.enabled, "TiledMLP is not available; use "
                                    "model.enable_gradient_checkpointing=true"),
        "model.mtp.enable": (m.mtp.get("enable"), "multi-token prediction heads are trained by upstream's Megatron "
                             "engine only; remove it"),
        "model.lora.rank": (m.lora.get("rank"), "model.lora is Megatron's LoRA section; use model.lora_rank / "
                            "model.lora_alpha / model.target_modules"),
        "engine.param_offload": (e.param_offload, offload),
        "engine.optimizer_offload": (e.optimizer_offload, offload),
        "engine.offload_policy": (e.offload_policy, offload),
        "engine.forward_prefetch": (e.forward_prefetch, "FSDP1 prefetching; FSDP2 prefetches by itself here"),
        "engine.use_orig_params": (e.use_orig_params, "an FSDP1 setting; FSDP2 always keeps the original parameters"),
        "engine.full_determinism": (e.full_determinism, "deterministic kernels are not switched on here; remove it"),
        "engine.entropy_from_logits_with_chunking": (e.entropy_from_logits_with_chunking, entropy),
        "engine.entropy_checkpointing": (e.entropy_checkpointing, entropy),
        "engine.pad_to_length": (e.pad_to_length, "batches are padded to their longest row here, not bucketed"),
        "engine.forward_only": (e.forward_only, "the SFT trainer trains; use python -m verl.trainer.main_eval to "
                                "score a model"),
        "engine.qat.enable": (e.qat.enable, "quantization-aware training is not available; remove it"),
        "profiler.enable": (cfg.profiler.enable, "the SFT trainer has no profiler here; remove it"),
        "data.balance_dp_token": (d.balance_dp_token, "not implemented (upstream's SFT trainer does not read it "
                                  "either); remove it"),
        "data.custom_cls.path": (d.custom_cls.path, "custom dataset classes are not loaded; write the rows as "
                                 "conversations in data.messages_key"),
        "data.use_shm": (d.use_shm, "data is read in place, not copied to shared memory; remove it"),
        "data.apply_chat_template_kwargs": (d.apply_chat_template_kwargs, "the chat template runs with its own "
                                            "defaults here; remove it"),
        "trainer.default_hdfs_dir": (t.default_hdfs_dir, "checkpoints are not copied to HDFS; "
                                     "trainer.default_local_dir may be any mounted path"),
    }  # fmt: skip


def _value_errors(cfg: DictConfig) -> list[str]:
    """Refusals of values outside what is honoured here (not on/off switches)."""
    errors: list[str] = []
    e, o, d, t = cfg.engine, cfg.optim, cfg.data, cfg.trainer

    def need(ok: bool, key: str, value: Any, why: str) -> None:
        if not ok:
            errors.append(f"{key}={value}: {why}")

    # fmt: off
    need(e.wrap_policy.min_num_params == 0, "engine.wrap_policy.min_num_params", e.wrap_policy.min_num_params,
         "only 0 is supported (FSDP2 shards every decoder layer); remove it")
    need(bool(e.reshard_after_forward), "engine.reshard_after_forward", e.reshard_after_forward,
         "parameters are always resharded after the forward here; remove it")
    need(e.fsdp_size == -1 or e.fsdp_size >= 1, "engine.fsdp_size", e.fsdp_size,
         "must be -1 (shard over all ranks) or a group size >= 1")
    need(str(e.model_dtype) in ("fp32", "float32"), "engine.model_dtype", e.model_dtype,
         "only fp32 master weights are supported; compute runs in engine.dtype")
    need(e.ulysses_sequence_parallel_size >= 1, "engine.ulysses_sequence_parallel_size",
         e.ulysses_sequence_parallel_size, "must be >= 1")
    backend = cfg.model.fused_kernel_options.impl_backend
    need(str(backend) in ("torch", "triton"), "model.fused_kernel_options.impl_backend", backend,
         "expected torch or triton (both run the chunked plain-torch LM head here)")
    need(str(e.strategy) in ("fsdp", "fsdp2"), "engine.strategy", e.strategy,
         "fsdp or fsdp2 (both run FSDP2 here); fsdp_turbo is not available")
    need(str(e.dtype) in ("auto", "bfloat16", "float16", "float32"), "engine.dtype", e.dtype,
         "expected auto, bfloat16, float16 or float32")
    need(o.total_training_steps == -1, "optim.total_training_steps", o.total_training_steps,
         "filled in by the trainer (as upstream); set trainer.total_training_steps instead")
    need(o.num_cycles == 0.5, "optim.num_cycles", o.num_cycles, "only 0.5 (one half-cosine) is available")
    for key in ("lr_scheduler_type", "warmup_style"):
        value = o[key]
        need(value is None and key == "warmup_style" or str(value) in ("constant", "cosine"), f"optim.{key}", value,
             "expected constant or cosine")
    need(d.train_max_samples == -1 and d.val_max_samples == -1, "data.train_max_samples / val_max_samples",
         f"{d.train_max_samples} / {d.val_max_samples}", "only -1 (all rows); write a smaller file instead")
    need(d.enable_thinking_default in (None, "none"), "data.enable_thinking_default", d.enable_thinking_default,
         "thinking switches are not passed to the chat template here; use none")
    need(d.num_workers >= 0, "data.num_workers", d.num_workers, "must be >= 0")
    need(d.max_token_len_per_gpu >= 1, "data.max_token_len_per_gpu", d.max_token_len_per_gpu, "must be >= 1")
    need(list(t.profile_interval) == [-1, -1], "trainer.profile_interval", list(t.profile_interval),
         "the SFT trainer has no profiler here; use [-1, -1]")
    need(str(t.device) in ("cuda", "cpu"), "trainer.device", t.device,
         "cuda or cpu (Ascend NPUs are not supported here)")
    for key in ("save_freq", "test_freq"):
        value = t[key]
        need(value == "after_each_epoch" or isinstance(value, int), f"trainer.{key}", value,
             "an int or after_each_epoch")
    save = set(cfg.checkpoint.save_contents)
    need({"model", "optimizer", "extra"} <= save <= {"model", "optimizer", "extra", "hf_model"},
         "checkpoint.save_contents", sorted(save), "checkpoints always hold model, optimizer and extra (so that a "
         "resume is exact); add hf_model for a Hugging Face export at the end")
    load = set(cfg.checkpoint.load_contents)  # by default the same list as save_contents: one error is enough
    need(load == save or load >= {"model", "optimizer", "extra"}, "checkpoint.load_contents",
         sorted(cfg.checkpoint.load_contents), "a resume always loads model, optimizer and extra")
    # fmt: on
    return errors


def engine_config_errors(cfg: DictConfig) -> list[str]:
    """Every setting of a v0.9 SFT config refused here, one line each (key, value, why, what to use instead)."""
    errors = [f"{key}={value!r}: not supported: {why}" for key, (value, why) in _refused(cfg).items() if _is_set(value)]
    errors += _value_errors(cfg)
    if cfg.model.trust_remote_code:
        errors += remote_code_errors([("model.trust_remote_code", cfg.model.path)], cfg.trainer.allow_unsafe_operations)
    return errors


def engine_config_warnings(cfg: DictConfig) -> list[str]:
    """What a v0.9 setting means here when that differs in memory or speed (never in the loss)."""
    warnings: list[str] = []
    sp = int(cfg.engine.ulysses_sequence_parallel_size)
    if sp > 1:
        warnings.append(
            f"engine.ulysses_sequence_parallel_size={sp}: sequences are not split across ranks here; every rank "
            "trains whole sequences of its share of the batch (same loss and gradient, more activation memory per "
            "GPU; lower data.max_token_len_per_gpu if it runs out)"
        )
    return warnings


def _expand(path: Any) -> Any:
    """``~`` in a data path or a list of them, as upstream's pandas reader expands it."""
    if isinstance(path, str):
        return os.path.expanduser(path)
    if path is None:
        return None
    return [os.path.expanduser(str(p)) for p in path]


def _model_path(path: str) -> str:
    expanded = os.path.expanduser(path)
    return expanded if path.startswith("~") else path  # hub ids and bundled names pass through


def to_sft_overrides(cfg: DictConfig) -> dict[str, Any]:
    """The ``sft_trainer.yaml`` keys (dotted) that train what the v0.9 SFT config ``cfg`` asks.

    ``trainer.save_freq`` / ``test_freq`` of ``after_each_epoch`` are left at -1 here: the steps of an epoch are only
    known once the data is read (:func:`verl.trainer.sft_trainer.run_sft_engine` fills them in).
    """
    data, model, engine, optim, trainer = cfg.data, cfg.model, cfg.engine, cfg.optim, cfg.trainer
    # upstream's no_padding layout cuts an over-long conversation at the right even for truncation=left
    # (verl/utils/dataset/multiturn_sft_dataset.py, NO_PADDING branch); the right-padded layout honours left
    truncation = str(data.truncation)
    if truncation == "left" and str(data.pad_mode) == "no_padding":
        truncation = "right"
    lr_scheduler = str(optim.warmup_style) if optim.warmup_style is not None else str(optim.lr_scheduler_type)
    return {
        "data.train_files": _expand(data.train_files),
        "data.val_files": _expand(data.val_files),
        "data.messages_key": str(data.messages_key),
        "data.max_length": int(data.max_length),
        "data.truncation": truncation,
        "data.train_batch_size": int(data.train_batch_size),
        "data.micro_batch_size_per_gpu": int(data.micro_batch_size_per_gpu),
        "data.use_dynamic_bsz": bool(data.use_dynamic_bsz),
        "data.max_token_len_per_gpu": int(data.max_token_len_per_gpu),
        "data.shuffle": True,  # upstream's DistributedSampler(shuffle=True, drop_last=True)
        "data.drop_last": True,  # and its StatefulDataLoader(drop_last=True): steps per epoch = rows // batch
        "data.seed": int(trainer.seed),
        "model.path": _model_path(str(model.path)),
        "model.tokenizer_path": _model_path(str(model.tokenizer_path)) if model.tokenizer_path else None,
        "model.trust_remote_code": bool(model.trust_remote_code),
        "model.enable_gradient_checkpointing": bool(model.enable_gradient_checkpointing),
        "model.override_config": dict(model.override_config),
        "model.dtype": str(engine.dtype),
        "model.lora_rank": int(model.lora_rank),
        "model.lora_alpha": int(model.lora_alpha),
        "model.target_modules": model.target_modules
        if isinstance(model.target_modules, str)
        else list(model.target_modules),
        "model.external_lib": model.external_lib,
        # use_liger: Liger's loss kernel (fused linear cross-entropy) is the same chunked LM head
        "model.use_fused_kernels": bool(model.use_fused_kernels) or bool(model.use_liger),
        "model.use_remove_padding": bool(model.use_remove_padding),
        "model.fsdp_size": int(engine.fsdp_size),  # checked against the world size at launch (check_world)
        "optim.lr": float(optim.lr),
        "optim.optimizer": str(optim.optimizer),
        "optim.optimizer_impl": str(optim.optimizer_impl),
        "optim.override_optimizer_config": (
            None if optim.override_optimizer_config is None else dict(optim.override_optimizer_config)
        ),
        "optim.zero_indexed_step": bool(optim.zero_indexed_step),
        "optim.betas": list(optim.betas),
        "optim.weight_decay": float(optim.weight_decay),
        "optim.lr_warmup_steps": max(int(optim.lr_warmup_steps), 0),  # -1: the ratio decides, as upstream
        "optim.lr_warmup_steps_ratio": float(optim.lr_warmup_steps_ratio),
        "optim.lr_scheduler_type": lr_scheduler,
        "optim.warmup_style": None,
        "optim.min_lr_ratio": float(optim.min_lr_ratio),
        "optim.clip_grad": float(optim.clip_grad),
        "trainer.project_name": str(trainer.project_name),
        "trainer.experiment_name": str(trainer.experiment_name),
        "trainer.default_local_dir": str(trainer.default_local_dir),
        "trainer.total_epochs": int(trainer.total_epochs),
        "trainer.total_training_steps": trainer.total_training_steps,
        "trainer.logger": list(trainer.logger),
        "trainer.seed": int(engine.seed),  # upstream's engine seeds torch (model init, LoRA, dropout)
        "trainer.save_freq": trainer.save_freq if isinstance(trainer.save_freq, int) else -1,
        "trainer.test_freq": trainer.test_freq if isinstance(trainer.test_freq, int) else -1,
        "trainer.max_ckpt_to_keep": trainer.max_ckpt_to_keep,
        "trainer.resume_mode": str(trainer.resume_mode),
        "trainer.resume_from_path": trainer.resume_from_path,
        "trainer.device": str(trainer.device),
        "trainer.export_hf": "hf_model" in list(cfg.checkpoint.save_contents),
        "trainer.upstream_log_names": True,  # VERL_FILE_LOGGER_* files name metrics as upstream's SFT trainer
        "trainer.allow_unsafe_operations": bool(trainer.allow_unsafe_operations),
    }


def check_world(cfg: DictConfig, world_size: int | None) -> None:
    """Launch checks (``world_size``: torchrun's ``WORLD_SIZE``, None when not launched by it).

    Upstream reads the world from torchrun and not from ``trainer.nnodes`` / ``n_gpus_per_node``; here a config that
    asks for several GPUs without a launcher is refused with the torchrun command, and the Ulysses size must divide
    the world as upstream's device mesh requires. ``engine.fsdp_size`` follows upstream's ``create_device_mesh``:
    -1 or the world size and more shard over all ranks, a divisor ``k`` of the world size shards within groups of
    ``k`` ranks and replicates across them (HSDP); another size is refused here, before anything loads.

    Raises:
        ConfigError: one line with the fix.
    """
    want = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    if world_size is None and want > 1:
        raise ConfigError(
            f"trainer.nnodes={cfg.trainer.nnodes} x trainer.n_gpus_per_node={cfg.trainer.n_gpus_per_node} = {want} "
            f"GPUs, but this process was not started by torchrun; run `torchrun --nnodes={cfg.trainer.nnodes} "
            f"--nproc_per_node={cfg.trainer.n_gpus_per_node} -m verl.trainer.sft_trainer ...`"
        )
    sp = int(cfg.engine.ulysses_sequence_parallel_size)
    world = world_size or 1
    if sp > 1 and world % sp != 0:
        raise ConfigError(
            f"engine.ulysses_sequence_parallel_size={sp} does not divide the world size {world} (as upstream's "
            "device mesh requires); use a divisor of the number of ranks"
        )
    from verl.utils.fsdp_utils import fsdp_size_problem

    problem = fsdp_size_problem(int(cfg.engine.fsdp_size), world, "engine.fsdp_size")
    if problem is not None:
        raise ConfigError(problem)
