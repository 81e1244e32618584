"""The PPO critic of one data-parallel rank: token values of responses and the clipped value-loss update."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict

from verl.trainer.ppo.core_algos import compute_value_loss
from verl.utils.model_loader import forward_values
from verl.utils.padding import pack_padded_batch, unpack_to_padded
from verl.utils.torch_functional import masked_mean
from verl.workers.actor.micro_batching import (
    as_dict_config,
    autocast_context,
    check_finite_loss,
    clip_grad_and_step,
    current_lr,
    dp_mean_token_count,
    enable_input_grads_for_checkpointing,
    iter_mini_batches,
    loss_share,
    module_device,
    response_mask_of,
    restore_order,
    split_micro_batches,
)
from verl.workers.critic.base import BasePPOCritic

if TYPE_CHECKING:
    from verl.protocol import DataProto


def _require_keys(batch: TensorDict, keys: list[str], who: str) -> None:
    missing = [k for k in keys if k not in batch.keys()]
    if missing:
        raise KeyError(f"{who}: data.batch lacks {missing}; it has {sorted(batch.keys())}")


def response_values_forward(module: torch.nn.Module, micro: TensorDict, use_remove_padding: bool) -> torch.Tensor:
    """Values ``[bs, response_len]`` of one micro-batch, aligned like the actor's log-probs.

    The value of response token ``t`` is the model's output at the position whose logits predict it, i.e. the
    state before emitting the token: columns ``[-response_len - 1, -1)`` of the ``[bs, seqlen]`` value map. The
    result is float32 and not yet masked.
    """
    input_ids = micro["input_ids"]
    attention_mask = micro["attention_mask"]
    bs, seqlen = input_ids.shape
    response_len = micro["responses"].shape[-1]
    if use_remove_padding:
        packed = pack_padded_batch(input_ids, attention_mask)
        values = forward_values(module, packed.input_ids, None, packed.position_ids)[0]  # [total_tokens]
        values = unpack_to_padded(values.float(), packed.indices, bs, seqlen)
    else:
        position_ids = micro["position_ids"] if "position_ids" in micro.keys() else None
        values = forward_values(module, input_ids, attention_mask, position_ids).float()
    return values[:, -response_len - 1 : -1]


class DataParallelPPOCritic(BasePPOCritic):
    """PPO value model on one data-parallel rank (verl's ``dp_critic``).

    ``config.ppo_mini_batch_size`` is in sequences on this rank (the worker multiplies the prompt count by
    ``rollout_n`` and divides by the world size); ``ppo_micro_batch_size_per_gpu`` counts sequences per
    forward/backward, or ``use_dynamic_bsz`` packs micro-batches to ``ppo_max_token_len_per_gpu`` tokens.

    Args:
        config: the ``critic`` section (DictConfig, dict or dataclass).
        critic_module: a value model accepted by ``verl.utils.model_loader.forward_values``.
        critic_optimizer: needed for ``update_critic``.
        lr_scheduler: reported in ``critic/lr``; the worker steps it.
        use_remove_padding: pack valid tokens into one row (``critic.model.use_remove_padding``); the config
            key ``model.use_remove_padding`` is read when None.
    """

    def __init__(
        self,
        config: Any,
        critic_module: torch.nn.Module,
        critic_optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler: Any | None = None,
        use_remove_padding: bool | None = None,
    ) -> None:
        super().__init__(as_dict_config(config, "critic"))
        self.critic_module = critic_module
        self.critic_optimizer = critic_optimizer
        self.lr_scheduler = lr_scheduler
        if use_remove_padding is None:
            use_remove_padding = bool((self.config.get("model") or {}).get("use_remove_padding", False))
        self.use_remove_padding = bool(use_remove_padding)
        enable_input_grads_for_checkpointing(critic_module)

    def _forward_micro_batch(self, micro: TensorDict) -> torch.Tensor:
        device = module_device(self.critic_module)
        with autocast_context(device, str(self.config.get("dtype", "float32"))):
            return response_values_forward(self.critic_module, micro, self.use_remove_padding)

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values ``[bs, response_len]`` of the responses, zero outside ``response_mask``; no gradients.

        Reads ``input_ids``, ``attention_mask``, ``position_ids``, ``responses`` (and ``response_mask``) from
        ``data.batch`` and ``micro_batch_size``, ``use_dynamic_bsz``, ``max_token_len`` from ``data.meta_info``.
        """
        who = "DataParallelPPOCritic.compute_values"
        keys = ["input_ids", "attention_mask", "responses"]
        _require_keys(data.batch, keys, who)
        keys += [k for k in ("position_ids", "response_mask") if k in data.batch.keys()]
        batch = data.batch.select(*keys)
        micro_batches, order = split_micro_batches(
            batch,
            data.meta_info.get("micro_batch_size"),
            bool(data.meta_info.get("use_dynamic_bsz", False)),
            data.meta_info.get("max_token_len"),
        )
        device = module_device(self.critic_module)
        was_training = self.critic_module.training
        self.critic_module.eval()
        outputs = []
        try:
            with torch.no_grad():
                for micro in micro_batches:
                    micro = micro.to(device)
                    values = self._forward_micro_batch(micro)
                    outputs.append(values * response_mask_of(micro).to(values.dtype))
        finally:
            self.critic_module.train(was_training)
        return restore_order(torch.cat(outputs, dim=0), order)

    def update_critic(self, data: DataProto) -> dict[str, list[float]]:
        """``ppo_epochs`` x mini-batches x micro-batches of clipped value regression, one step per mini-batch.

        Loss per micro-batch (PPO value clipping, Schulman et al. 2017 / verl ``compute_value_loss``):
        ``0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2)`` aggregated with ``loss_agg_mode``, scaled
        by the micro-batch's share of its mini-batch. Reads ``values`` (old), ``returns``, ``response_mask`` and
        the model inputs from ``data.batch``.

        Returns:
            ``critic/vf_loss``, ``critic/vf_clipfrac``, ``critic/vpred_mean``, ``critic/grad_norm`` per mini-batch;
            ``critic/grad_norm_nonfinite`` and ``critic/lr`` once.
        """
        who = "DataParallelPPOCritic.update_critic"
        if self.critic_optimizer is None:
            raise RuntimeError(f"{who}: this critic was built without an optimizer")
        cfg = self.config
        global_step = data.meta_info.get("global_steps", "unknown")
        keys = ["input_ids", "attention_mask", "responses", "values", "returns"]
        _require_keys(data.batch, keys, who)
        keys += [k for k in ("position_ids", "response_mask") if k in data.batch.keys()]
        batch = data.batch.select(*keys)

        loss_agg_mode = str(cfg.get("loss_agg_mode", "token-mean"))
        cliprange_value = float(cfg.get("cliprange_value", 0.5))
        mini_batch_size = int(cfg.get("ppo_mini_batch_size", len(data)))
        use_dynamic_bsz = bool(cfg.get("use_dynamic_bsz", False))
        micro_batch_size = cfg.get("ppo_micro_batch_size_per_gpu", None)
        max_token_len = cfg.get("ppo_max_token_len_per_gpu", None)
        device = module_device(self.critic_module)
        seed = int(global_step) if isinstance(global_step, int) else 0

        self.critic_module.train()
        metrics: dict[str, list[float]] = defaultdict(list)
        skipped = 0
        for epoch in range(int(cfg.get("ppo_epochs", 1))):
            for mini_idx, mini in iter_mini_batches(
                batch, mini_batch_size, epoch, bool(cfg.get("shuffle", False)), seed
            ):
                mini_tokens = dp_mean_token_count(response_mask_of(mini))
                micro_batches, _ = split_micro_batches(mini, micro_batch_size, use_dynamic_bsz, max_token_len)
                self.critic_optimizer.zero_grad(set_to_none=True)
                mini_metrics: dict[str, float] = defaultdict(float)
                for micro_idx, micro in enumerate(micro_batches):
                    micro = micro.to(device)
                    response_mask = response_mask_of(micro).to(torch.float32)
                    share = loss_share(response_mask, mini_tokens, len(mini), loss_agg_mode)
                    vpreds = self._forward_micro_batch(micro)
                    vf_loss, vf_clipfrac = compute_value_loss(
                        vpreds=vpreds,
                        returns=micro["returns"],
                        values=micro["values"],
                        response_mask=response_mask,
                        cliprange_value=cliprange_value,
                        loss_agg_mode=loss_agg_mode,
                    )
                    check_finite_loss(vf_loss, "critic", global_step, epoch, mini_idx, micro_idx, vf_loss=vf_loss)
                    (vf_loss * share).backward()
                    mini_metrics["critic/vf_loss"] += share * float(vf_loss.detach().item())
                    clipfrac = vf_clipfrac.detach().item() if torch.is_tensor(vf_clipfrac) else vf_clipfrac
                    mini_metrics["critic/vf_clipfrac"] += share * float(clipfrac)
                    vpred_mean = masked_mean(vpreds.detach(), response_mask)
                    mini_metrics["critic/vpred_mean"] += share * float(vpred_mean.item())
                grad_norm, stepped = clip_grad_and_step(self.critic_module, self.critic_optimizer, cfg.get("grad_clip"))
                skipped += 0 if stepped else 1
                for name, value in mini_metrics.items():
                    metrics[name].append(value)
                metrics["critic/grad_norm"].append(grad_norm)
        self.critic_optimizer.zero_grad(set_to_none=True)
        metrics["critic/grad_norm_nonfinite"].append(float(skipped))
        lr = current_lr(self.critic_optimizer, self.lr_scheduler)
        if lr is not None:
            metrics["critic/lr"].append(lr)
        return dict(metrics)
