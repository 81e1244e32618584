"""The critic worker: the value model of one data-parallel rank (verl's ``CriticWorker``)."""

from __future__ import annotations

import os
from typing import Any

import torch

from verl.protocol import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.device import get_device_name, get_torch_device, init_distributed_if_needed
from verl.workers.config import CriticConfig
from verl.workers.fsdp_setup import (
    ModelHolder,
    checkpoint_manager,
    enable_ulysses,
    is_already_placed,
    loaded,
    per_rank_sequences,
    private_section,
    set_torch_threads,
    shard,
)
from verl.workers.parallel_state import OffloadPolicy, gather_group_batch, own_rows


class CriticWorker(Worker):
    """Value model (LM backbone + scalar head) of one data-parallel rank. ``config`` is the ``critic`` section."""

    def __init__(self, config: Any, critic_module: torch.nn.Module | None = None, tokenizer: Any = None):
        """``critic_module`` / ``tokenizer``: the Python API's own value model and tokenizer, used in place."""
        super().__init__()
        self._given_critic_module = critic_module
        self._given_tokenizer = tokenizer
        set_torch_threads()
        self.config = private_section(config, CriticConfig)
        self.device_name = get_device_name(os.environ.get("VERL_DEVICE", "auto"))
        init_distributed_if_needed(self.device_name)
        self.compute_device = get_torch_device(self.device_name)
        n = int(self.config.rollout_n)
        self.sp_size = int(self.config.ulysses_sequence_parallel_size or 1)
        self.offload = None
        self.config.ppo_mini_batch_size = per_rank_sequences(
            int(self.config.ppo_mini_batch_size), n, self.world_size // self.sp_size, "critic.ppo_mini_batch_size"
        )
        # Ulysses: each rank holds 1 / sp of every sequence, so the group's token budget is sp times the per-GPU one
        self.config.ppo_max_token_len_per_gpu = int(self.config.ppo_max_token_len_per_gpu) * self.sp_size
        self.tokenizer = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from verl.models.loader import (
            load_tokenizer,
            load_value_model,
            resolve_attn_implementation,
            resolve_model_path,
        )
        from verl.workers.critic.dp_critic import DataParallelPPOCritic

        model_cfg = self.config.model
        module = self._given_critic_module
        if self._given_tokenizer is not None:
            self.tokenizer = self._given_tokenizer
        else:
            self.tokenizer = load_tokenizer(
                model_cfg.tokenizer_path or model_cfg.path, trust_remote_code=bool(model_cfg.trust_remote_code)
            )
        if module is None:
            from verl.models.vlm import config_has_vision

            critic_path = resolve_model_path(model_cfg.path)
            if model_cfg.use_shm:
                from verl.models.shm import copy_to_shm

                critic_path = copy_to_shm(critic_path)
            if config_has_vision(critic_path):
                raise ValueError(
                    f"critic.model.path={model_cfg.path} is a vision-language model: a critic that sees the images is "
                    "not supported; train vision-language models with a critic-free estimator (grpo, rloo, ...)"
                )
            module = load_value_model(
                critic_path,
                dtype=torch.float32,
                trust_remote_code=bool(model_cfg.trust_remote_code),
                attn_implementation=resolve_attn_implementation(
                    model_cfg.attn_implementation, self.compute_device.type
                ),
                # critic.model.override_config: HF config fields of the value model (e.g. dropout), as for the actor
                override_config=dict(model_cfg.override_config) or None,
            ).to(self.compute_device)
        elif not is_already_placed(module):
            module = module.to(self.compute_device)
        if model_cfg.enable_gradient_checkpointing:
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        sp_group = None
        if self.sp_size > 1:
            from verl.utils.ulysses import sequence_parallel_group

            enable_ulysses(module)
            sp_group = sequence_parallel_group(self.compute_device.type, self.sp_size)
        module = shard(self, module, self.config.fsdp_config)
        self.critic_module = module
        self.critic_optimizer, self.critic_lr_scheduler = ModelHolder.build_optimizer(module, self.config.optim)
        self.critic = DataParallelPPOCritic(
            config=self.config,
            critic_module=module,
            critic_optimizer=self.critic_optimizer,
            lr_scheduler=self.critic_lr_scheduler,
            use_remove_padding=bool(model_cfg.use_remove_padding),
            sp_group=sp_group,
        )
        self.offload = OffloadPolicy(
            module, self.critic_optimizer, self.config.fsdp_config, self.compute_device, "critic.fsdp_config"
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` ``[batch, response_len]`` of the current value model."""
        data, rows = gather_group_batch(data.to(self.compute_device), self.critic.sp_group)
        data.meta_info["micro_batch_size"] = int(self.config.forward_micro_batch_size_per_gpu)
        data.meta_info["max_token_len"] = int(self.config.ppo_max_token_len_per_gpu)
        data.meta_info["use_dynamic_bsz"] = bool(self.config.use_dynamic_bsz)
        with loaded(self.offload):
            values = self.critic.compute_values(data)
        return own_rows(DataProto.from_dict(tensors={"values": values}), rows).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        data, _ = gather_group_batch(data.to(self.compute_device), self.critic.sp_group)
        with loaded(self.offload, with_optimizer=True):
            metrics = self.critic.update_critic(data)
        if self.critic_lr_scheduler is not None:
            metrics["critic/lr"] = self.critic_lr_scheduler.get_last_lr()[0]
            self.critic_lr_scheduler.step()
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int = 0, save_contents: list[str] | None = None) -> None:
        with loaded(self.offload, with_optimizer=True):
            manager = checkpoint_manager(
                self, self.critic_module, self.critic_optimizer, self.critic_lr_scheduler, self.config, save_contents
            )
            manager.save_checkpoint(local_path, global_step)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str) -> None:
        with loaded(self.offload, with_optimizer=True):
            manager = checkpoint_manager(
                self, self.critic_module, self.critic_optimizer, self.critic_lr_scheduler, self.config
            )
            manager.load_checkpoint(local_path)
