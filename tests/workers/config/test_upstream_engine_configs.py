"""Upstream verl v0.9's engine-era names in ``verl.workers.config`` and the rules they enforce at construction."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from omegaconf import OmegaConf

from verl.base_config import omega_conf_to_dataclass
from verl.trainer.config.loader import load_config
from verl.trainer.config.validation import ConfigError
from verl.utils.optim import build_lr_scheduler
from verl.workers.config import (
    ActorConfig,
    ActorRolloutRefConfig,
    CriticConfig,
    FSDPActorConfig,
    FSDPCriticConfig,
    FSDPOptimizerConfig,
    HFModelConfig,
    McoreActorConfig,
    McoreCriticConfig,
    McoreOptimizerConfig,
    ModelConfig,
    OptimConfig,
    OptimizerConfig,
    RolloutConfig,
)


def test_fsdp_names_are_our_sections_and_mcore_refuses() -> None:
    assert FSDPActorConfig is ActorConfig and FSDPCriticConfig is CriticConfig
    assert HFModelConfig is ModelConfig and OptimizerConfig is OptimConfig
    assert issubclass(FSDPOptimizerConfig, OptimConfig) and FSDPOptimizerConfig().min_lr_ratio is None
    for cls in (McoreActorConfig, McoreCriticConfig, McoreOptimizerConfig):
        with pytest.raises(NotImplementedError, match="Megatron-Core engine is not available"):
            cls(lr=0.1) if cls is McoreOptimizerConfig else cls()


def test_target_names_the_class_and_nested_sections() -> None:
    cfg = omega_conf_to_dataclass(
        {
            "_target_": "verl.workers.config.ActorConfig",
            "ppo_mini_batch_size": 8,
            "optim": {"_target_": "verl.workers.config.FSDPOptimizerConfig", "lr": 0.1},
        }
    )
    assert type(cfg) is ActorConfig and type(cfg.optim) is FSDPOptimizerConfig and cfg.optim.lr == 0.1
    assert "_target_" not in cfg and "_target_" not in cfg.optim  # an instruction, not a key
    with pytest.raises(TypeError, match="is not a OptimConfig"):
        omega_conf_to_dataclass(
            {"_target_": "verl.workers.config.ActorConfig", "optim": {"_target_": "verl.workers.config.CriticConfig"}}
        )
    # a type given by the caller decides (upstream's too): _target_ is then only dropped
    typed = omega_conf_to_dataclass({"optim": {"_target_": "verl.workers.config.FSDPOptimizerConfig"}}, ActorConfig)
    assert type(typed.optim) is OptimConfig and "_target_" not in typed.optim
    with pytest.raises(TypeError, match="give dataclass_type"):
        omega_conf_to_dataclass({"lr": 0.1})
    with pytest.raises(NotImplementedError, match="Megatron"):
        omega_conf_to_dataclass({"_target_": "verl.workers.config.McoreActorConfig"})


def test_actor_micro_batch_rules_and_frozen_fields() -> None:
    with pytest.raises(ValueError, match="You have set both"):
        ActorConfig(ppo_micro_batch_size=4)  # per_gpu keeps its default 32
    with pytest.raises(ValueError, match="Please set at least one"):
        ActorConfig(ppo_micro_batch_size_per_gpu=None)
    assert ActorConfig(ppo_micro_batch_size_per_gpu=None, use_dynamic_bsz=True).ppo_micro_batch_size_per_gpu is None
    with pytest.raises(ValueError, match="Invalid loss_agg_mode"):
        ActorConfig(loss_agg_mode="mean")
    cfg = ActorConfig()
    cfg.ppo_mini_batch_size = 64  # the worker turns prompts into per-rank rows
    with pytest.raises(dataclasses.FrozenInstanceError, match="clip_ratio is fixed"):
        cfg.clip_ratio = 0.3
    assert cfg.ppo_mini_batch_size == 64 and cfg.clip_ratio == 0.2
    assert dataclasses.replace(cfg, clip_ratio=0.3).clip_ratio == 0.3


def test_actor_validate() -> None:
    cfg = ActorConfig(ppo_mini_batch_size=16, ppo_micro_batch_size=4, ppo_micro_batch_size_per_gpu=None)
    cfg.validate(n_gpus=4, train_batch_size=16)
    with pytest.raises(ValueError, match=r"train_batch_size \(8\) must be >="):
        cfg.validate(n_gpus=4, train_batch_size=8)
    with pytest.raises(ValueError, match=r"must be >= n_gpus \(8\)"):
        cfg.validate(n_gpus=8, train_batch_size=16)
    sp = ActorConfig(ulysses_sequence_parallel_size=2)
    sp.validate(n_gpus=2, train_batch_size=256, model_config={"use_remove_padding": True})
    with pytest.raises(ValueError, match="use_remove_padding"):
        sp.validate(n_gpus=2, train_batch_size=256, model_config={"use_remove_padding": False})


def test_critic_rules() -> None:
    with pytest.raises(ValueError, match="must be divisible by"):
        CriticConfig(ppo_mini_batch_size=7, ppo_micro_batch_size=4, ppo_micro_batch_size_per_gpu=None)
    with pytest.raises(ValueError, match=r"critic.ppo_micro_batch_size \(2\) \* ulysses"):
        CriticConfig(ppo_mini_batch_size=8, ppo_micro_batch_size=2, ppo_micro_batch_size_per_gpu=None).validate(4, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        CriticConfig().cliprange_value = 1.0


def test_actor_rollout_n_follows_rollout_n() -> None:
    arr = ActorRolloutRefConfig(rollout=RolloutConfig(n=4))
    assert arr.actor.rollout_n == 4
    assert load_config(["actor_rollout_ref.rollout.n=2"]).actor_rollout_ref.actor.rollout_n == 2
    with pytest.raises(ConfigError, match="actor.rollout_n=3 differs"):
        load_config(["actor_rollout_ref.actor.rollout_n=3"])
    with pytest.raises(ConfigError, match="ppo_micro_batch_size_per_gpu=null needs"):
        load_config(["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"])
    load_config(
        ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null", "actor_rollout_ref.actor.use_dynamic_bsz=true"]
    )


def test_optimizer_schedule_names_and_num_cycles() -> None:
    with pytest.raises(ValueError, match="lr_scheduler_type='linear'"):
        OptimConfig(lr_scheduler_type="linear")
    assert OptimConfig(warmup_style="cosine").lr_scheduler_type == "cosine"
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    # num_cycles=1: a full cosine period over 4 steps goes down to the floor and back up
    sched = build_lr_scheduler(opt, FSDPOptimizerConfig(lr=1.0, lr_scheduler_type="cosine", num_cycles=1.0), 4)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([1.0, 0.5, 0.0, 0.5, 1.0])


def test_model_target_modules_types() -> None:
    merged = OmegaConf.merge(OmegaConf.structured(HFModelConfig), {"target_modules": ["q_proj", "v_proj"]})
    assert OmegaConf.to_object(merged).target_modules == ["q_proj", "v_proj"]
    with pytest.raises(TypeError, match="must list strings"):
        ModelConfig(target_modules=["q_proj", 3])
    with pytest.raises(TypeError, match="exclude_modules must be a string or a list"):
        ModelConfig(exclude_modules=5)
    with pytest.raises(ValueError, match="impl_backend='cuda'"):
        OmegaConf.to_object(
            OmegaConf.merge(OmegaConf.structured(HFModelConfig), {"fused_kernel_options": {"impl_backend": "cuda"}})
        )
