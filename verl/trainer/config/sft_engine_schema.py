"""Typed schema of ``sft_trainer_engine.yaml``: upstream verl v0.9's SFT config (``python -m
verl.trainer.sft_trainer``), with its ``model`` (hf_model), ``engine`` (fsdp), ``optim`` (fsdp) and ``profiler``
groups composed in.

The keys are translated onto ``sft_trainer.yaml`` by :func:`verl.trainer.config.sft_engine_checks.to_sft_overrides`
and trained by the one SFT trainer; the values that cannot be honoured are refused by
:func:`~verl.trainer.config.sft_engine_checks.engine_config_errors` (``cross_field_checks``). Sub-sections that only
matter to a refused feature (``model.mtp``, ``model.lora``, ``engine.qat``, ``engine.turbo_config``,
``profiler.tool_config``) are kept as upstream wrote them, so a script that sets them reads the same; their switch is
what is checked. The dataclass defaults mirror the YAML (a test keeps them identical).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, Union

# registers ${verl.experiment_name:...}, the default trainer.experiment_name of sft_trainer_engine.yaml
from verl.trainer.config import experiment_name as _experiment_name  # noqa: F401

if TYPE_CHECKING:
    from omegaconf import DictConfig


def _list(*items: Any) -> Any:
    return field(default_factory=lambda: list(items))


def _dict(**items: Any) -> Any:
    return field(default_factory=lambda: dict(items))


@dataclass
class FusedKernelOptions:
    impl_backend: str = "torch"  # torch | triton: both select the chunked plain-torch head here


@dataclass
class TiledMLPConfig:
    enabled: bool = False
    num_shards: int = 4


@dataclass
class EngineModelConfig:
    """``model`` (upstream's ``model/hf_model.yaml``)."""

    path: str = "~/models/deepseek-llm-7b-chat"
    hf_config_path: Optional[str] = None
    tokenizer_path: Optional[str] = None
    use_shm: bool = False
    trust_remote_code: bool = False
    custom_chat_template: Optional[str] = None
    external_lib: Optional[str] = None
    override_config: dict[str, Any] = _dict()
    enable_gradient_checkpointing: bool = True
    enable_activation_offload: bool = False
    use_remove_padding: bool = True
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: Union[str, list[str]] = "all-linear"
    exclude_modules: Optional[Union[str, list[str]]] = None
    lora_adapter_path: Optional[str] = None
    use_liger: bool = False
    use_fused_kernels: bool = False  # true: SFT's loss through the chunked LM head (verl/workers/actor/fused_head.py)
    fused_kernel_options: FusedKernelOptions = field(default_factory=FusedKernelOptions)
    tiled_mlp: TiledMLPConfig = field(default_factory=TiledMLPConfig)
    mtp: dict[str, Any] = _dict(
        enable=False,
        enable_train=False,
        enable_rollout=False,
        detach_encoder=False,
        mtp_loss_scaling_factor=0.1,
        speculative_algorithm="EAGLE",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        method="mtp",
        num_speculative_tokens=1,
    )
    lora: dict[str, Any] = _dict(
        type="lora",
        merge=False,
        rank=0,
        alpha=32,
        dropout=0.0,
        target_modules=["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
        exclude_modules=[],
        dropout_position="pre",
        lora_A_init_method="xavier",
        lora_B_init_method="zero",
        a2a_experimental=False,
        dtype=None,
        adapter_path=None,
        freeze_vision_model=True,
        freeze_vision_projection=True,
        freeze_language_model=True,
    )


@dataclass
class WrapPolicy:
    min_num_params: int = 0


def _turbo_defaults() -> dict[str, Any]:
    plan = {
        "param_dtype": "bf16",
        "reduce_dtype": "fp32",
        "output_dtype": "bf16",
        "fsdp_implementation": "native",
        "num_to_forward_prefetch": 1,
        "num_to_backward_prefetch": 1,
    }
    return {
        "distributed": {
            "fully_shard_parallel_size": 16,
            "tensor_parallel_size": 1,
            "expert_parallel_size": 1,
            "expert_fully_shard_parallel_size": 1,
            "ulysses_parallel_size": 1,
            "fsdp_plan": plan,
        }
    }


@dataclass
class QATConfig:
    enable: bool = False
    mode: str = "w4a16"
    group_size: int = 16
    ignore_patterns: list[str] = _list("lm_head", "embed_tokens", "re:.*mlp.gate$")
    activation_observer: str = "static_minmax"
    quantization_config_path: Optional[str] = None


@dataclass
class FSDPEngineSection:
    """``engine`` (upstream's ``engine/fsdp.yaml``)."""

    wrap_policy: WrapPolicy = field(default_factory=WrapPolicy)
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    forward_prefetch: bool = False
    model_dtype: str = "fp32"
    use_orig_params: bool = False
    seed: int = 42
    full_determinism: bool = False
    ulysses_sequence_parallel_size: int = 1
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    use_torch_compile: bool = True
    entropy_checkpointing: bool = False
    pad_to_length: bool = False
    pad_to_length_bucket: int = 1024
    forward_only: bool = False
    strategy: str = "fsdp"
    dtype: str = "auto"  # upstream: bfloat16; auto picks bf16 only where the device multiplies it natively
    qat: QATConfig = field(default_factory=QATConfig)
    turbo_config: dict[str, Any] = field(default_factory=_turbo_defaults)


@dataclass
class FSDPOptimSection:
    """``optim`` (upstream's ``optim/fsdp.yaml``)."""

    optimizer: str = "AdamW"
    optimizer_impl: str = "torch.optim"
    lr: float = 1.0e-3
    lr_warmup_steps_ratio: float = 0.0
    total_training_steps: int = -1
    weight_decay: float = 0.01
    lr_warmup_steps: int = -1
    betas: list[float] = _list(0.9, 0.999)
    clip_grad: float = 1.0
    min_lr_ratio: float = 0.0
    num_cycles: float = 0.5
    lr_scheduler_type: str = "constant"
    zero_indexed_step: bool = True
    warmup_style: Optional[str] = None
    override_optimizer_config: Optional[dict[str, Any]] = None


def _tool_config_defaults() -> dict[str, Any]:
    window = {"profile_token_start": None, "profile_token_end": None}
    schedule = {"skip_first": 0, "wait": 0, "warmup": 0, "active": 0, "repeat": 0}
    return {
        "npu": {"contents": [], "level": "level0", "analysis": True, "discrete": False, **window, "name": "npu"},
        "nsys": {"discrete": None, "name": "nsight"},
        "torch": {"contents": [], "discrete": False, **window, "schedule": schedule, "name": "torch"},
        "torch_memory": {"trace_alloc_max_entries": 100000, "stack_depth": 32, "name": "torch_memory"},
        "precision_debugger": {"config_path": None, "steps": None, "stages": None, "name": "precision_debugger"},
    }


@dataclass
class ProfilerSection:
    """``profiler`` (upstream's ``profiler/profiler.yaml``); only ``enable=false`` is accepted."""

    tool: str = "torch"
    enable: bool = False
    all_ranks: bool = False
    ranks: list[int] = _list()
    save_path: str = "outputs/profile"
    relocate_results: bool = False
    finish_hook_cmd: Optional[str] = None
    finish_hook_all_ranks: bool = False
    finish_hook_ranks: list[int] = _list()
    tool_config: dict[str, Any] = field(default_factory=_tool_config_defaults)


@dataclass
class CustomCls:
    path: Optional[str] = None
    name: Optional[str] = None


@dataclass
class EngineDataConfig:
    """``data`` of upstream's v0.9 SFT config (conversation rows in ``messages_key``)."""

    train_batch_size: int = 256
    micro_batch_size_per_gpu: int = 4
    max_token_len_per_gpu: int = 8192
    use_dynamic_bsz: bool = True
    train_files: Optional[Union[str, list[str]]] = "~/data/gsm8k/train.parquet"
    val_files: Optional[Union[str, list[str]]] = None
    train_max_samples: int = -1
    val_max_samples: int = -1
    messages_key: str = "messages"
    tools_key: str = "tools"
    enable_thinking_key: str = "enable_thinking"
    enable_thinking_default: Optional[Union[str, bool]] = "none"
    pad_mode: Literal["no_padding", "right"] = "no_padding"
    max_length: int = 1024
    truncation: Literal["error", "left", "right"] = "error"
    balance_dp_token: bool = False
    custom_cls: CustomCls = field(default_factory=CustomCls)
    use_shm: bool = False
    apply_chat_template_kwargs: dict[str, Any] = _dict()
    num_workers: int = 8
    ignore_input_ids_mismatch: bool = False


@dataclass
class EngineCheckpointConfig:
    save_contents: list[str] = _list("model", "optimizer", "extra")
    load_contents: list[str] = _list("model", "optimizer", "extra")


@dataclass
class EngineTrainerConfig:
    """``trainer`` of upstream's v0.9 SFT config."""

    # YAML: checkpoints/${trainer.project_name}/${trainer.experiment_name}
    default_local_dir: str = "checkpoints/verl/sft-deepseek-llm-7b-chat-gsm8k"
    default_hdfs_dir: Optional[str] = None
    project_name: str = "verl"  # upstream: gsm8k-sft
    # upstream: test; YAML: ${verl.experiment_name:sft,...}: sft-<model>-<data>[-lora<r>] (experiment_name.py)
    experiment_name: str = "sft-deepseek-llm-7b-chat-gsm8k"
    total_epochs: int = 4
    total_training_steps: Optional[int] = None
    logger: list[str] = _list("console", "wandb")
    seed: int = 1
    save_freq: Union[int, Literal["after_each_epoch"]] = -1
    test_freq: Union[int, Literal["after_each_epoch"]] = -1
    max_ckpt_to_keep: Optional[int] = None
    balance_batch: bool = True
    resume_mode: Literal["auto", "disable", "resume_path"] = "auto"
    resume_from_path: Optional[str] = None
    device: str = "cuda"
    nnodes: int = 1
    n_gpus_per_node: int = 1
    profile_interval: list[int] = _list(-1, -1)
    allow_unsafe_operations: bool = False  # this project's switch: model.trust_remote_code=true needs it


@dataclass
class SFTEngineConfig:
    """The whole ``sft_trainer_engine.yaml``: what ``python -m verl.trainer.sft_trainer`` runs."""

    config_name: ClassVar[str] = "sft_trainer_engine"

    model: EngineModelConfig = field(default_factory=EngineModelConfig)
    engine: FSDPEngineSection = field(default_factory=FSDPEngineSection)
    optim: FSDPOptimSection = field(default_factory=FSDPOptimSection)
    profiler: ProfilerSection = field(default_factory=ProfilerSection)
    data: EngineDataConfig = field(default_factory=EngineDataConfig)
    checkpoint: EngineCheckpointConfig = field(default_factory=EngineCheckpointConfig)
    trainer: EngineTrainerConfig = field(default_factory=EngineTrainerConfig)

    @classmethod
    def cross_field_checks(cls, cfg: DictConfig) -> tuple[list[str], list[str]]:
        """``(errors, warnings)``: the settings refused here, each with the reason and what to use instead."""
        from verl.trainer.config.sft_engine_checks import engine_config_errors, engine_config_warnings

        return engine_config_errors(cfg), engine_config_warnings(cfg)
