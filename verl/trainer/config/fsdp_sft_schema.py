"""Typed schema of ``fsdp_sft_trainer.yaml``: verl's SFT config layout, accepted by
``python -m verl.trainer.fsdp_sft_trainer`` and mapped onto ``sft_trainer.yaml`` by :func:`to_sft_overrides`.

Every key does something or is refused at config time with the reason (``cross_field_checks``); the dataclass
defaults mirror the YAML (a test keeps them identical).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, Union

# registers ${verl.experiment_name:...}, the default trainer.experiment_name of fsdp_sft_trainer.yaml
from verl.trainer.config import experiment_name as _experiment_name  # noqa: F401

if TYPE_CHECKING:
    from omegaconf import DictConfig


def _list(*items: Any) -> Any:
    return field(default_factory=lambda: list(items))


@dataclass
class MultiturnConfig:
    """``data.multiturn``: conversations (``messages_key``) instead of prompt/response rows."""

    enable: bool = False
    messages_key: str = "messages"
    tools_key: str = "tools"
    enable_thinking_key: str = "enable_thinking"


@dataclass
class CustomClsConfig:
    """``data.custom_cls``: a user dataset class (not supported: refused when set)."""

    path: Optional[str] = None
    name: Optional[str] = None


@dataclass
class FSDPSFTDataConfig:
    """``data`` of verl's SFT config."""

    train_batch_size: int = 256
    micro_batch_size: Optional[int] = None
    micro_batch_size_per_gpu: int = 4
    train_files: Optional[Union[str, list[str]]] = None
    val_files: Optional[Union[str, list[str]]] = None
    prompt_key: str = "question"
    response_key: str = "answer"
    prompt_dict_keys: Optional[list[str]] = None
    response_dict_keys: Optional[list[str]] = None
    multiturn: MultiturnConfig = field(default_factory=MultiturnConfig)
    max_length: int = 1024
    truncation: Literal["error", "left", "right"] = "error"
    balance_dp_token: bool = False
    chat_template: Optional[str] = None
    custom_cls: CustomClsConfig = field(default_factory=CustomClsConfig)
    use_shm: bool = False


@dataclass
class WrapPolicyConfig:
    min_num_params: int = 0


@dataclass
class FSDPSFTFsdpConfig:
    """``model.fsdp_config``."""

    model_dtype: Literal["fp32", "bf16", "fp16", "float32", "bfloat16", "float16"] = "fp32"
    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    cpu_offload: bool = False
    offload_params: bool = False


@dataclass
class FSDPSFTModelConfig:
    """``model`` of verl's SFT config."""

    partial_pretrain: Optional[str] = None
    use_shm: bool = False
    fsdp_config: FSDPSFTFsdpConfig = field(default_factory=FSDPSFTFsdpConfig)
    external_lib: Optional[str] = None
    enable_gradient_checkpointing: bool = True
    trust_remote_code: bool = False
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: Union[str, list[str]] = "all-linear"
    use_liger: bool = False
    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"


@dataclass
class FSDPSFTOptimConfig:
    """``optim`` of verl's SFT config."""

    optimizer: str = "AdamW"
    optimizer_impl: str = "torch.optim"
    lr: float = 1.0e-5
    betas: list[float] = _list(0.9, 0.95)
    weight_decay: float = 0.01
    warmup_steps_ratio: float = 0.1
    lr_warmup_steps_ratio: Optional[float] = None
    clip_grad: float = 1.0
    lr_scheduler: str = "cosine"
    min_lr_ratio: float = 0.0


@dataclass
class FSDPSFTCheckpointConfig:
    save_contents: list[str] = _list("model", "optimizer", "extra")
    load_contents: list[str] = _list("model", "optimizer", "extra")


@dataclass
class FSDPSFTTrainerConfig:
    """``trainer`` of verl's SFT config."""

    # YAML: checkpoints/${trainer.project_name}/${trainer.experiment_name}
    default_local_dir: str = "checkpoints/verl/sft"
    default_hdfs_dir: Optional[str] = None
    project_name: str = "verl"  # verl: gsm8k-sft
    # verl: test; YAML: ${verl.experiment_name:sft,...}: sft-<model>-<data>[-lora<r>] (experiment_name.py)
    experiment_name: str = "sft"
    total_epochs: int = 4
    total_training_steps: Optional[int] = None
    logger: list[str] = _list("console")
    seed: int = 1
    save_freq: int = -1
    test_freq: int = -1
    nnodes: int = 1
    n_gpus_per_node: int = 1
    max_ckpt_to_keep: Optional[int] = None
    resume_mode: Literal["auto", "disable", "resume_path"] = "auto"
    resume_from_path: Optional[str] = None
    resume_path: Optional[str] = None
    checkpoint: FSDPSFTCheckpointConfig = field(default_factory=FSDPSFTCheckpointConfig)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    allow_unsafe_operations: bool = False  # this project's switch: model.trust_remote_code=true needs it


_FULL_CHECKPOINT = {"model", "optimizer", "extra"}


@dataclass
class FSDPSFTConfig:
    """The whole ``fsdp_sft_trainer.yaml``: what ``python -m verl.trainer.fsdp_sft_trainer`` runs."""

    config_name: ClassVar[str] = "fsdp_sft_trainer"

    data: FSDPSFTDataConfig = field(default_factory=FSDPSFTDataConfig)
    model: FSDPSFTModelConfig = field(default_factory=FSDPSFTModelConfig)
    optim: FSDPSFTOptimConfig = field(default_factory=FSDPSFTOptimConfig)
    ulysses_sequence_parallel_size: int = 1
    use_remove_padding: bool = False
    trainer: FSDPSFTTrainerConfig = field(default_factory=FSDPSFTTrainerConfig)

    @classmethod
    def cross_field_checks(cls, cfg: DictConfig) -> tuple[list[str], list[str]]:
        """``(errors, warnings)``: the settings this implementation refuses, each with the reason."""
        errors: list[str] = []
        warnings: list[str] = []
        data, model, optim, trainer = cfg.data, cfg.model, cfg.optim, cfg.trainer
        refused = {
            "data.balance_dp_token": (data.balance_dp_token, "ranks get equal row counts, not equal token counts"),
            "data.custom_cls.path": (data.custom_cls.path, "custom dataset classes are not loaded; use prompt/"
                                     "response rows (with *_dict_keys) or messages rows (data.multiturn)"),
            "data.chat_template": (data.chat_template, "the tokenizer's own chat template is used"),
            "data.use_shm": (data.use_shm, "data is read in place, not copied to shared memory"),
            "model.use_shm": (model.use_shm, "the model is read in place, not copied to shared memory"),
            "model.fsdp_config.cpu_offload": (model.fsdp_config.cpu_offload, "CPU offload is not available for SFT"),
            "model.fsdp_config.offload_params": (model.fsdp_config.offload_params, "CPU offload is not available "
                                                 "for SFT"),
            "trainer.default_hdfs_dir": (trainer.default_hdfs_dir, "checkpoints are not copied to HDFS; "
                                         "trainer.default_local_dir may be any mounted path"),
        }  # fmt: skip
        for key, (value, why) in refused.items():
            if value:
                errors.append(f"{key}={value!r} is not supported: {why}")
        if str(model.fsdp_config.model_dtype) not in ("fp32", "float32"):
            errors.append(
                f"model.fsdp_config.model_dtype={model.fsdp_config.model_dtype}: only fp32 master weights are "
                "supported (compute already runs in bf16 on devices with native bf16)"
            )
        if model.fsdp_config.wrap_policy.min_num_params != 0:
            errors.append(
                "model.fsdp_config.wrap_policy.min_num_params: only 0 is supported (FSDP2 shards every layer), "
                f"got {model.fsdp_config.wrap_policy.min_num_params}"
            )
        if cfg.ulysses_sequence_parallel_size < 1:
            errors.append(f"ulysses_sequence_parallel_size: must be >= 1, got {cfg.ulysses_sequence_parallel_size}")
        elif cfg.ulysses_sequence_parallel_size > 1:
            # verl's SFT loss is the token mean over the global batch, so splitting sequences changes memory only
            warnings.append(
                f"ulysses_sequence_parallel_size={cfg.ulysses_sequence_parallel_size}: sequences are not split "
                "across ranks here; every rank trains whole sequences of its share of the batch (same loss and "
                "gradient, more activation memory per GPU)"
            )
        if str(optim.lr_scheduler) not in ("cosine", "constant"):
            errors.append(f"optim.lr_scheduler={optim.lr_scheduler!r}: expected cosine or constant (wsd is not "
                          "available)")  # fmt: skip
        for key in ("save_contents", "load_contents"):
            contents = set(trainer.checkpoint[key])
            # hf_model (saving only): the weights in Hugging Face form, which this trainer writes at the end anyway
            allowed = _FULL_CHECKPOINT | ({"hf_model"} if key == "save_contents" else set())
            if not _FULL_CHECKPOINT <= contents <= allowed:
                errors.append(
                    f"trainer.checkpoint.{key}={sorted(contents)}: SFT checkpoints always hold model, optimizer "
                    "and extra (RNG, scheduler, step) so that a resume is exact"
                    + ("; add hf_model for a Hugging Face export" if key == "save_contents" else "")
                )
        if model.lora_rank < 0:
            errors.append(f"model.lora_rank: must be >= 0, got {model.lora_rank}")
        if trainer.nnodes < 1 or trainer.n_gpus_per_node < 1:
            errors.append(f"trainer.nnodes / n_gpus_per_node must be >= 1, got {trainer.nnodes} / "
                          f"{trainer.n_gpus_per_node}")  # fmt: skip
        if data.micro_batch_size is not None:
            warnings.append("data.micro_batch_size is deprecated (verl); it is used as data.micro_batch_size_per_gpu")
        return errors, warnings


def expected_world_size(cfg: DictConfig) -> int:
    """``trainer.nnodes * trainer.n_gpus_per_node``."""
    return int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)


def launcher_world_size() -> int | None:
    """The world size torchrun (or another launcher) set in ``WORLD_SIZE``; None when not launched that way."""
    value = os.environ.get("WORLD_SIZE")
    return int(value) if value else None


def to_sft_overrides(cfg: DictConfig) -> dict[str, Any]:
    """The ``sft_trainer.yaml`` keys (dotted) that reproduce a verl SFT config."""
    data, model, optim, trainer = cfg.data, cfg.model, cfg.optim, cfg.trainer
    resume_mode, resume_from = str(trainer.resume_mode), trainer.resume_from_path
    if trainer.resume_path:
        resume_mode, resume_from = "resume_path", trainer.resume_path
    warmup_ratio = optim.lr_warmup_steps_ratio if optim.lr_warmup_steps_ratio is not None else optim.warmup_steps_ratio
    micro = data.micro_batch_size if data.micro_batch_size is not None else data.micro_batch_size_per_gpu
    return {
        "data.train_files": data.train_files,
        "data.val_files": data.val_files,
        "data.prompt_key": data.prompt_key,
        "data.response_key": data.response_key,
        "data.prompt_dict_keys": list(data.prompt_dict_keys) if data.prompt_dict_keys else None,
        "data.response_dict_keys": list(data.response_dict_keys) if data.response_dict_keys else None,
        # conversations only when multi-turn is on; "" matches no column
        "data.messages_key": data.multiturn.messages_key if data.multiturn.enable else "",
        "data.apply_chat_template": True,  # verl renders a plain prompt as a user turn of the chat template
        "data.max_length": data.max_length,
        "data.truncation": data.truncation,
        "data.train_batch_size": data.train_batch_size,
        "data.micro_batch_size_per_gpu": micro,
        "data.seed": trainer.seed,
        "model.path": model.partial_pretrain,
        "model.trust_remote_code": model.trust_remote_code,
        "model.enable_gradient_checkpointing": model.enable_gradient_checkpointing,
        "model.lora_rank": model.lora_rank,
        "model.lora_alpha": model.lora_alpha,
        "model.target_modules": model.target_modules
        if isinstance(model.target_modules, str)
        else list(model.target_modules),
        "model.external_lib": model.external_lib,
        # Liger's loss kernel is a fused linear cross-entropy: the same chunked LM head (no [batch, seq, vocab] logits)
        "model.use_fused_kernels": bool(model.use_liger),
        "model.use_remove_padding": bool(cfg.use_remove_padding),
        "optim.lr": optim.lr,
        "optim.optimizer": str(optim.optimizer),
        "optim.optimizer_impl": str(optim.optimizer_impl),
        "optim.betas": list(optim.betas),
        "optim.weight_decay": optim.weight_decay,
        "optim.lr_warmup_steps_ratio": warmup_ratio,
        "optim.lr_scheduler_type": str(optim.lr_scheduler),
        "optim.warmup_style": str(optim.lr_scheduler),  # the older name wins when set: keep both the same
        "optim.min_lr_ratio": optim.min_lr_ratio,
        "optim.clip_grad": optim.clip_grad,
        "trainer.project_name": trainer.project_name,
        "trainer.experiment_name": trainer.experiment_name,
        "trainer.default_local_dir": trainer.default_local_dir,
        "trainer.total_epochs": trainer.total_epochs,
        "trainer.total_training_steps": trainer.total_training_steps,
        "trainer.logger": list(trainer.logger),
        "trainer.seed": trainer.seed,
        "trainer.allow_unsafe_operations": trainer.allow_unsafe_operations,
        "trainer.save_freq": trainer.save_freq,
        "trainer.test_freq": trainer.test_freq,
        "trainer.max_ckpt_to_keep": trainer.max_ckpt_to_keep,
        "trainer.resume_mode": resume_mode,
        "trainer.resume_from_path": resume_from,
        "trainer.device": trainer.device,
        "trainer.upstream_log_names": True,  # VERL_FILE_LOGGER_* files name metrics as upstream's SFT trainer
    }
