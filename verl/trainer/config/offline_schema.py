"""Typed schemas of the offline trainers' defaults: ``sft_trainer.yaml``, ``dpo_trainer.yaml``, ``kto_trainer.yaml``,
``gkd_trainer.yaml``.

Same conventions as :mod:`verl.trainer.config.schema` (``Optional`` allows null, ``Literal`` is a closed choice, a
nested dataclass is a section); the dataclass defaults mirror the YAML files (a test keeps them identical). Batch
sizes count examples (SFT rows, DPO pairs, KTO rows): ``data.train_batch_size`` per optimizer step over all ranks,
``data.micro_batch_size_per_gpu`` per forward/backward on one rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, Union

from verl.trainer.config.remote_code_checks import remote_code_errors
from verl.trainer.config.schema import ComputeDType, OptimConfig

if TYPE_CHECKING:
    from omegaconf import DictConfig

DPOLossType = Literal["sigmoid", "ipo", "hinge"]


def _list(*items: Any) -> Any:
    return field(default_factory=lambda: list(items))


@dataclass
class OfflineDataConfig:
    """``data``: files, field names, length limits and batch sizes shared by SFT, DPO and KTO."""

    train_files: Optional[Union[str, list[str]]] = None
    val_files: Optional[Union[str, list[str]]] = None
    prompt_key: str = "prompt"
    max_length: int = 1024
    max_prompt_length: Optional[int] = None
    truncation: Literal["error", "right", "left"] = "right"
    train_batch_size: int = 8
    micro_batch_size_per_gpu: int = 2
    shuffle: bool = True
    seed: int = 42


@dataclass
class SFTDataConfig(OfflineDataConfig):
    """``data`` of SFT: ``{prompt, response}`` rows, or ``{messages}`` conversations."""

    response_key: str = "response"
    messages_key: str = "messages"
    prompt_dict_keys: Optional[list[str]] = None  # path inside a dict-valued prompt field, e.g. [question]
    response_dict_keys: Optional[list[str]] = None
    apply_chat_template: bool = False  # render a plain-text prompt as a user message with the chat template
    image_key: str = "images"  # a vision-language model's rows: the images their <image> placeholders refer to


@dataclass
class SFTTrainDataConfig(SFTDataConfig):
    """``data`` of ``sft_trainer.yaml``: SFT rows plus how a rank's rows are cut into micro-batches."""

    use_dynamic_bsz: bool = False  # true: micro-batches packed up to max_token_len_per_gpu tokens, not by row count
    max_token_len_per_gpu: int = 8192  # token budget of a micro-batch (a longer row forms one on its own)
    drop_last: bool = False  # true: an epoch leaves out its last partial batch (several ranks always do)


@dataclass
class DPODataConfig(OfflineDataConfig):
    """``data`` of DPO: ``{prompt, chosen, rejected}`` rows."""

    chosen_key: str = "chosen"
    rejected_key: str = "rejected"


@dataclass
class KTODataConfig(OfflineDataConfig):
    """``data`` of KTO: ``{prompt, completion, label}`` rows."""

    completion_key: str = "completion"
    label_key: str = "label"


@dataclass
class OfflineModelConfig:
    """``model``: the policy being trained (fp32 master weights, ``dtype`` autocast for compute)."""

    path: str = "smollm2-135m-instruct"
    tokenizer_path: Optional[str] = None
    trust_remote_code: bool = False
    enable_gradient_checkpointing: bool = False
    override_config: dict[str, Any] = field(default_factory=dict)
    dtype: ComputeDType = "auto"
    # the valid tokens of each micro-batch packed, no padding computed (null: where the packed forward equals the
    # padded one, verl.utils.fsdp_utils.resolve_remove_padding); same losses and gradients
    use_remove_padding: Optional[bool] = None
    # FSDP2 sharding group under torchrun (world size > 1): -1 (or the world size and more) shards the policy, and a
    # DPO/KTO reference model, over all ranks; a divisor k of the world size shards within groups of k ranks and
    # replicates across the world / k groups (hybrid sharding, HSDP); same loss and gradients
    fsdp_size: int = -1


@dataclass
class LoRAModelConfig(OfflineModelConfig):
    """``model`` of a trainer that can train the policy through LoRA adapters (``lora_rank > 0``). For DPO and
    KTO the reference is then the policy with its adapters disabled (no second model), unless ``ref.path``."""

    lora_rank: int = 0  # 0: full fine-tuning; > 0: LoRA adapters of this rank on target_modules
    lora_alpha: int = 16  # LoRA scaling: the update is (lora_alpha / lora_rank) * B @ A
    target_modules: Union[str, list[str]] = "all-linear"


@dataclass
class SFTModelConfig(LoRAModelConfig):
    """``model`` of SFT: the policy, optionally trained through LoRA adapters (``lora_rank > 0``)."""

    external_lib: Optional[str] = None  # a module imported before the model is loaded (registers custom models)


@dataclass
class SFTTrainModelConfig(SFTModelConfig):
    """``model`` of ``sft_trainer.yaml``: the SFT policy plus how its loss reaches the LM head."""

    # true: the token log-probs come from the chunked LM head (verl/workers/actor/fused_head.py), no [batch, seq,
    # vocab] logits; same loss and gradient
    use_fused_kernels: bool = False


@dataclass
class RefModelConfig:
    """``ref``: the frozen reference policy of DPO/KTO (a copy of ``model.path`` unless ``path`` is set)."""

    path: Optional[str] = None
    precompute_ref_log_probs: bool = False


@dataclass
class OfflineOptimConfig(OptimConfig):
    """``optim``: AdamW + schedule (as ``actor.optim`` of PPO) and the gradient-norm clip."""

    clip_grad: float = 1.0


@dataclass
class OfflineReportConfig:
    """``trainer.report``: the run's ``report.html`` (verl/reporting/report)."""

    enable: bool = True


@dataclass
class OfflineTrainerConfig:
    """``trainer``: epochs/steps, logging, checkpoints, export."""

    project_name: str = "verl"
    # YAML: ${verl.experiment_name:<trainer>,...}: <trainer>-<model>-<data>[-lora<r>] (experiment_name.py)
    experiment_name: str = "offline"
    namespace: Optional[str] = None
    logger: list[str] = _list("console", "file")
    log_dir: Optional[str] = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    total_epochs: int = 1
    total_training_steps: Optional[int] = None
    logging_steps: int = 1
    save_freq: int = -1
    test_freq: int = -1
    max_ckpt_to_keep: Optional[int] = 2
    resume_mode: Literal["auto", "disable", "resume_path"] = "auto"
    resume_from_path: Optional[str] = None
    overwrite_checkpoints: bool = False  # resume_mode=disable in a directory with checkpoints: delete them
    default_local_dir: str = "outputs/verl/offline"
    export_hf: bool = True
    # names in upstream's VERL_FILE_LOGGER_* file: upstream SFT's train/<name>, val/<name> (reporting/upstream_env.py)
    upstream_log_names: bool = False
    plot: bool = True  # metrics.png at each save and at the end
    report: OfflineReportConfig = field(default_factory=OfflineReportConfig)
    seed: int = 1
    torch_threads: Optional[int] = None
    allow_unsafe_operations: bool = False  # required by model.trust_remote_code=true


def _lora_checks(cfg: DictConfig) -> list[str]:
    """Errors of the ``model.lora_*`` settings (:class:`LoRAModelConfig`)."""
    errors = []
    if cfg.model.lora_rank < 0:
        errors.append(f"model.lora_rank: must be >= 0 (0 disables LoRA), got {cfg.model.lora_rank}")
    if cfg.model.lora_rank > 0 and cfg.model.lora_alpha <= 0:
        errors.append(f"model.lora_alpha: must be > 0, got {cfg.model.lora_alpha}")
    return errors


def _common_checks(cfg: DictConfig) -> list[str]:
    """Cross-field checks shared by the offline schemas (types were checked already)."""
    errors: list[str] = []
    data, optim, trainer = cfg.data, cfg.optim, cfg.trainer
    if data.max_length < 2:
        errors.append(f"data.max_length: must be >= 2, got {data.max_length}")
    if data.max_prompt_length is not None and not 0 < data.max_prompt_length < data.max_length:
        errors.append(
            f"data.max_prompt_length: must be in [1, data.max_length={data.max_length}), got {data.max_prompt_length}"
        )
    for key in ("train_batch_size", "micro_batch_size_per_gpu"):
        if data[key] < 1:
            errors.append(f"data.{key}: must be >= 1, got {data[key]}")
    if optim.lr < 0:
        errors.append(f"optim.lr: must be >= 0, got {optim.lr}")
    if optim.clip_grad <= 0:
        errors.append(f"optim.clip_grad: must be > 0, got {optim.clip_grad}")
    if trainer.total_epochs < 1:
        errors.append(f"trainer.total_epochs: must be >= 1, got {trainer.total_epochs}")
    if trainer.total_training_steps is not None and trainer.total_training_steps < 1:
        errors.append(f"trainer.total_training_steps: must be >= 1 or null, got {trainer.total_training_steps}")
    if trainer.logging_steps < 1:
        errors.append(f"trainer.logging_steps: must be >= 1, got {trainer.logging_steps}")
    fsdp_size = cfg.model.fsdp_size
    if fsdp_size != -1 and fsdp_size < 1:
        errors.append(f"model.fsdp_size: must be -1 (shard over all ranks) or a group size >= 1, got {fsdp_size}")
    if cfg.model.trust_remote_code:
        errors += remote_code_errors([("model.trust_remote_code", cfg.model.path)], trainer.allow_unsafe_operations)
    if trainer.namespace is not None:
        from verl.utils.fs import validate_namespace

        try:
            validate_namespace(trainer.namespace)
        except ValueError as e:
            errors.append(f"trainer.namespace: {e}")
    return errors


@dataclass
class SFTConfig:
    """The whole ``sft_trainer.yaml``: what ``python -m verl.trainer.main_sft`` runs."""

    config_name: ClassVar[str] = "sft_trainer"

    data: SFTTrainDataConfig = field(default_factory=SFTTrainDataConfig)
    model: SFTTrainModelConfig = field(default_factory=SFTTrainModelConfig)
    optim: OfflineOptimConfig = field(default_factory=OfflineOptimConfig)
    trainer: OfflineTrainerConfig = field(
        default_factory=lambda: OfflineTrainerConfig(
            experiment_name="sft-smollm2-135m-instruct", default_local_dir="outputs/verl/sft-smollm2-135m-instruct"
        )
    )

    @classmethod
    def cross_field_checks(cls, cfg: DictConfig) -> tuple[list[str], list[str]]:
        """``(errors, warnings)`` of the checks spanning several keys (plus the LoRA settings)."""
        errors = _common_checks(cfg) + _lora_checks(cfg)
        if cfg.data.max_token_len_per_gpu < 1:
            errors.append(f"data.max_token_len_per_gpu: must be >= 1, got {cfg.data.max_token_len_per_gpu}")
        return errors, []


@dataclass
class DPOConfig:
    """The whole ``dpo_trainer.yaml``: what ``python -m verl.trainer.main_dpo`` runs."""

    config_name: ClassVar[str] = "dpo_trainer"

    data: DPODataConfig = field(default_factory=DPODataConfig)
    model: LoRAModelConfig = field(default_factory=LoRAModelConfig)
    ref: RefModelConfig = field(default_factory=RefModelConfig)
    optim: OfflineOptimConfig = field(default_factory=lambda: OfflineOptimConfig(lr=1.0e-6))
    trainer: OfflineTrainerConfig = field(
        default_factory=lambda: OfflineTrainerConfig(
            experiment_name="dpo-smollm2-135m-instruct", default_local_dir="outputs/verl/dpo-smollm2-135m-instruct"
        )
    )
    beta: float = 0.1
    loss_type: DPOLossType = "sigmoid"
    label_smoothing: float = 0.0

    @classmethod
    def cross_field_checks(cls, cfg: DictConfig) -> tuple[list[str], list[str]]:
        """``(errors, warnings)``: the shared and LoRA checks plus ``beta > 0`` and label smoothing (sigmoid only)."""
        errors = _common_checks(cfg) + _lora_checks(cfg)
        if cfg.beta <= 0:
            errors.append(f"beta: must be > 0, got {cfg.beta}")
        if not 0.0 <= cfg.label_smoothing < 0.5:
            errors.append(f"label_smoothing: must be in [0, 0.5), got {cfg.label_smoothing}")
        if cfg.label_smoothing > 0 and cfg.loss_type != "sigmoid":
            errors.append(f"label_smoothing: only applies to loss_type=sigmoid, got loss_type={cfg.loss_type}")
        return errors, []


@dataclass
class KTOConfig:
    """The whole ``kto_trainer.yaml``: what ``python -m verl.trainer.main_kto`` runs."""

    config_name: ClassVar[str] = "kto_trainer"

    data: KTODataConfig = field(default_factory=KTODataConfig)
    model: LoRAModelConfig = field(default_factory=LoRAModelConfig)
    ref: RefModelConfig = field(default_factory=RefModelConfig)
    optim: OfflineOptimConfig = field(default_factory=lambda: OfflineOptimConfig(lr=1.0e-6))
    trainer: OfflineTrainerConfig = field(
        default_factory=lambda: OfflineTrainerConfig(
            experiment_name="kto-smollm2-135m-instruct", default_local_dir="outputs/verl/kto-smollm2-135m-instruct"
        )
    )
    beta: float = 0.1
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0

    @classmethod
    def cross_field_checks(cls, cfg: DictConfig) -> tuple[list[str], list[str]]:
        """``(errors, warnings)``: the shared and LoRA checks plus ``beta > 0`` and positive class weights."""
        errors = _common_checks(cfg) + _lora_checks(cfg)
        if cfg.beta <= 0:
            errors.append(f"beta: must be > 0, got {cfg.beta}")
        for key in ("desirable_weight", "undesirable_weight"):
            if cfg[key] <= 0:
                errors.append(f"{key}: must be > 0, got {cfg[key]}")
        return errors, []


@dataclass
class TeacherConfig:
    """``teacher``: the frozen model the student is distilled from (its tokenizer must match the student's)."""

    path: str = "smollm2-135m-instruct"  # local HF dir, hub id or bundled name
    tokenizer_path: Optional[str] = None  # null: teacher.path


@dataclass
class GKDSection:
    """``gkd``: Generalized Knowledge Distillation (Agarwal et al. 2024) with TRL ``GKDConfig``'s names."""

    lmbda: float = 0.5  # probability that a step trains on student-generated responses (else dataset responses)
    beta: float = 0.5  # generalised JSD: 0 = KL(teacher || student), 1 = KL(student || teacher)
    temperature: float = 0.9  # sampling temperature of the student; both distributions are softened by it
    max_new_tokens: int = 128  # length of on-policy responses
    loss_type: Literal["jsd", "reverse_kl"] = "jsd"
    kl_coef: float = 1.0  # reverse_kl: coefficient of the per-token reverse-KL reward


@dataclass
class GKDConfig:
    """The whole ``gkd_trainer.yaml``: what ``python -m verl.trainer.main_gkd`` runs."""

    config_name: ClassVar[str] = "gkd_trainer"

    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    model: SFTModelConfig = field(default_factory=SFTModelConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    gkd: GKDSection = field(default_factory=GKDSection)
    optim: OfflineOptimConfig = field(default_factory=OfflineOptimConfig)
    trainer: OfflineTrainerConfig = field(
        default_factory=lambda: OfflineTrainerConfig(
            experiment_name="gkd-smollm2-135m-instruct", default_local_dir="outputs/verl/gkd-smollm2-135m-instruct"
        )
    )

    @classmethod
    def cross_field_checks(cls, cfg: DictConfig) -> tuple[list[str], list[str]]:
        """``(errors, warnings)``: the shared and LoRA checks plus the ranges of the ``gkd`` keys; ``reverse_kl``
        (a policy gradient on the student's own samples) needs ``lmbda = 1``."""
        errors = _common_checks(cfg) + _lora_checks(cfg)
        gkd = cfg.gkd
        for key in ("lmbda", "beta"):
            if not 0.0 <= gkd[key] <= 1.0:
                errors.append(f"gkd.{key}: must be in [0, 1], got {gkd[key]}")
        if gkd.temperature <= 0:
            errors.append(f"gkd.temperature: must be > 0, got {gkd.temperature}")
        if gkd.max_new_tokens < 1:
            errors.append(f"gkd.max_new_tokens: must be >= 1, got {gkd.max_new_tokens}")
        if gkd.loss_type == "reverse_kl" and gkd.lmbda != 1.0:
            errors.append(
                f"gkd.loss_type=reverse_kl is a policy gradient on the student's own samples: set gkd.lmbda=1 "
                f"(got {gkd.lmbda})"
            )
        if gkd.kl_coef <= 0:
            errors.append(f"gkd.kl_coef: must be > 0, got {gkd.kl_coef}")
        return errors, []
