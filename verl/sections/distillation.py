"""The ``distillation`` section of a PPO run: on-policy distillation from a teacher as a dense per-token reward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from verl.base_config import BaseConfig
from verl.sections.literals import ComputeDType


@dataclass
class TeacherModelConfig(BaseConfig):
    """``distillation.teacher``: the frozen teacher (its tokenizer must equal the actor's)."""

    path: Optional[str] = None
    tokenizer_path: Optional[str] = None  # null: teacher.path
    trust_remote_code: bool = False


@dataclass
class TeacherInferenceConfig(BaseConfig):
    """``distillation.teacher_models.<name>.inference``: upstream serves the teacher with a rollout engine; here the
    teacher is a forward pass in the teacher worker group: ``dtype`` -> ``distillation.dtype``, ``max_model_len``
    is checked against the prompt + response length, ``gpu_memory_utilization`` (when set) ->
    ``distillation.gpu_memory_utilization`` (the teacher process's GPU memory cap); ``name`` must be an engine whose
    log-probs a forward pass reproduces (vllm, hf) and the parallel sizes must split the teacher's ranks as upstream
    requires (every rank holds a whole teacher here), see verl/trainer/config/distillation_keys.py."""

    name: Optional[str] = None
    dtype: Optional[str] = None
    tensor_model_parallel_size: int = 1
    expert_parallel_size: int = 1
    data_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    max_model_len: Optional[int] = None


@dataclass
class TeacherEntryConfig(BaseConfig):
    """``distillation.teacher_models.<name>``: one teacher of upstream's map; with two or more entries each is a
    teacher scoring the rows whose ``teacher_key`` column equals its ``key`` (verl/workers/teacher_routing.py)."""

    key: Optional[str] = None
    model_path: Optional[str] = None
    num_replicas: int = 0
    inference: TeacherInferenceConfig = field(default_factory=TeacherInferenceConfig)


@dataclass
class TeacherModelsConfig(BaseConfig):
    """``distillation.teacher_models``: upstream's default entry ``teacher_model`` (others added with ``+``, which
    drops it; the added entries are read off the section by :func:`verl.workers.teacher_routing.teacher_specs`)."""

    # entries added with + are teachers of the map, read and checked as such (verl/trainer/config/distillation_keys.py)
    entries_added_with_plus = True  # not a field: no annotation

    teacher_model: TeacherEntryConfig = field(default_factory=TeacherEntryConfig)


# upstream v0.9's distillation_loss.loss_mode names (verl/trainer/distillation/losses.py); the single-sample estimators
# act here as a per-token reward, forward_kl_topk (teacher top-k logits) is refused by the config checks
DistillationLossMode = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "forward_kl_topk"]


@dataclass
class DistillationLossConfig(BaseConfig):
    """``distillation.distillation_loss``: upstream v0.9's loss keys. With ``use_policy_gradient=true`` (the only
    form here) the per-token estimator ``loss_mode`` of (student, teacher) log-probs, clamped to
    ``[-loss_max_clamp, loss_max_clamp]``, is the negative per-token reward (``coef`` mirrors
    ``distillation_loss_coef``, ``task_reward_weight`` follows ``use_task_rewards``)."""

    loss_mode: DistillationLossMode = "k1"
    topk: Optional[int] = 32  # forward_kl_topk only (refused)
    use_task_rewards: bool = True
    distillation_loss_coef: float = 1.0
    loss_max_clamp: Optional[float] = None
    log_prob_min_clamp: Optional[float] = None  # upstream clamps top-k log-probs with it (forward_kl_topk only)
    use_policy_gradient: bool = True
    policy_loss_mode: Literal["vanilla"] = "vanilla"
    clip_ratio: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2


@dataclass
class DistillationConfig(BaseConfig):
    """``distillation``: each response token gets ``-coef * (log pi_actor(y_t) - log pi_teacher(y_t))`` added to its
    reward (the per-token reverse KL on the actor's own samples), and the task reward is scaled by
    ``task_reward_weight``; the teacher runs in its own worker group (role ``teacher``)."""

    enable: bool = False
    teacher: TeacherModelConfig = field(default_factory=TeacherModelConfig)
    coef: float = 1.0
    task_reward_weight: float = 1.0
    micro_batch_size_per_gpu: int = 8
    dtype: ComputeDType = "auto"
    # upstream v0.9's keys (verl/trainer/config/distillation/distillation.yaml), resolved onto the ones above by
    # verl/trainer/config/distillation_keys.py
    enabled: bool = False  # = enable
    n_gpus_per_node: int = 8  # teacher pool ranks per node (with nnodes > 0)
    nnodes: int = 0  # 0: the teacher shares the actor's ranks; > 0: a pool of its own (trainer.resource_pool_*)
    teacher_models: TeacherModelsConfig = field(default_factory=TeacherModelsConfig)
    teacher_key: str = "data_source"  # the column that routes rows to teachers (several teacher_models entries)
    # share of each GPU the teacher's process may use (CUDA, teacher pool of its own); None: no cap
    gpu_memory_utilization: Optional[float] = None
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)
