"""The PPO critic of one data-parallel rank: token values of responses and the clipped value-loss update."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict

from verl.algorithms.core_algos import compute_value_loss
from verl.base_config import omega_conf_to_dataclass
from verl.models.loader import forward_values
from verl.utils.padding import pack_padded_batch, unpack_to_padded, varlen_attention
from verl.utils.torch_functional import masked_mean
from verl.workers.actor.micro_batching import (
    autocast_context,
    enable_input_grads_for_checkpointing,
    forward_micro_batches_no_grad,
    module_device,
    require_batch_keys,
    response_mask_of,
    restore_order,
    run_mini_batch_updates,
)
from verl.workers.config import CriticConfig
from verl.workers.critic.base import BasePPOCritic

if TYPE_CHECKING:
    from verl.protocol import DataProto


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
    if use_remove_padding:  # rows as wide as the longest sequence, or one row for flash-attention's varlen kernels
        packed = pack_padded_batch(input_ids, attention_mask, into_rows=not varlen_attention(module))
        values = packed.tokens(forward_values(module, packed.input_ids, None, packed.position_ids))  # [tokens]
        values = unpack_to_padded(values.float(), packed.indices, bs, seqlen)
    else:
        position_ids = micro["position_ids"] if "position_ids" in micro.keys() else None
        values = forward_values(module, input_ids, attention_mask, position_ids).float()
    return values[:, -response_len - 1 : -1]


def sequence_parallel_values_forward(
    module: torch.nn.Module, micro: TensorDict, use_remove_padding: bool, sp_group: Any, grad_scale: float
) -> torch.Tensor:
    """:func:`response_values_forward` with each sequence split over the ranks of ``sp_group`` (Ulysses); see
    :func:`verl.workers.actor.response_forward.sequence_parallel_response_forward` for the scheme and ``grad_scale``."""
    from verl.utils import ulysses
    from verl.workers.actor.response_forward import sequence_parallel_inputs, ulysses_size

    bs, seqlen = micro["input_ids"].shape
    response_len = micro["responses"].shape[-1]
    ids, mask, positions, packed, length = sequence_parallel_inputs(micro, use_remove_padding, sp_group)
    ids, positions = (ulysses.pad_to_multiple(t, ulysses_size(sp_group), 0) for t in (ids, positions))
    with ulysses.ulysses_context(sp_group, mask, positions):
        local_mask = ulysses.local_slice(mask) if mask is not None else None
        values = forward_values(module, ulysses.local_slice(ids), local_mask, ulysses.local_slice(positions))
        values = ulysses.gather_sequence(values.float(), 1, grad_scale)[:, :length]
    if packed is not None:
        values = unpack_to_padded(values[0], packed.indices, bs, seqlen)
    return values[:, -response_len - 1 : -1]


class DataParallelPPOCritic(BasePPOCritic):
    """PPO value model on one data-parallel rank (verl's ``dp_critic``).

    ``config.ppo_mini_batch_size`` is in sequences on this rank (the worker multiplies the prompt count by
    ``rollout_n`` and divides by the world size); ``ppo_micro_batch_size_per_gpu`` counts sequences per
    forward/backward, or ``use_dynamic_bsz`` packs micro-batches to ``ppo_max_token_len_per_gpu`` tokens.

    Args:
        config: the ``critic`` section (DictConfig, dict or dataclass).
        critic_module: a value model accepted by ``verl.models.loader.forward_values``.
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
        sp_group: Any = None,
    ) -> None:
        super().__init__(omega_conf_to_dataclass(config, CriticConfig))
        self.sp_group = sp_group  # Ulysses: each sequence split over this group (None: whole sequences)
        self.critic_module = critic_module
        self.critic_optimizer = critic_optimizer
        self.lr_scheduler = lr_scheduler
        if use_remove_padding is None:
            use_remove_padding = bool(self.config.model.use_remove_padding)
        self.use_remove_padding = bool(use_remove_padding)
        enable_input_grads_for_checkpointing(critic_module)

    def _forward_micro_batch(self, micro: TensorDict) -> torch.Tensor:
        device = module_device(self.critic_module)
        with autocast_context(device, str(self.config.dtype)):
            if self.sp_group is not None:
                import torch.distributed as dist

                scale = float(dist.get_world_size(self.sp_group))
                return sequence_parallel_values_forward(
                    self.critic_module, micro, self.use_remove_padding, self.sp_group, scale
                )
            return response_values_forward(self.critic_module, micro, self.use_remove_padding)

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values ``[bs, response_len]`` of the responses, zero outside ``response_mask``; no gradients.

        Reads ``input_ids``, ``attention_mask``, ``position_ids``, ``responses`` (and ``response_mask``) from
        ``data.batch`` and ``micro_batch_size``, ``use_dynamic_bsz``, ``max_token_len`` from ``data.meta_info``.
        """
        who = "DataParallelPPOCritic.compute_values"
        keys = ["input_ids", "attention_mask", "responses"]
        require_batch_keys(data.batch, keys, who)
        keys += [k for k in ("position_ids", "response_mask") if k in data.batch.keys()]

        def masked_values(micro: TensorDict) -> torch.Tensor:
            values = self._forward_micro_batch(micro)
            return values * response_mask_of(micro).to(values.dtype)

        outputs, order = forward_micro_batches_no_grad(
            self.critic_module, data.batch.select(*keys), data.meta_info, masked_values
        )
        return restore_order(torch.cat(outputs, dim=0), order)

    def _micro_loss(
        self, micro: TensorDict, cliprange_value: float, loss_agg_mode: str
    ) -> tuple[torch.Tensor, dict[str, float], dict[str, torch.Tensor]]:
        """The clipped value loss of one micro-batch (aggregated with ``loss_agg_mode``) and its metrics."""
        response_mask = response_mask_of(micro).to(torch.float32)
        vpreds = self._forward_micro_batch(micro)
        vf_loss, vf_clipfrac = compute_value_loss(
            vpreds=vpreds,
            returns=micro["returns"],
            values=micro["values"],
            response_mask=response_mask,
            cliprange_value=cliprange_value,
            loss_agg_mode=loss_agg_mode,
            loss_scale_factor=self.config.loss_scale_factor,
        )
        clipfrac = vf_clipfrac.detach().item() if torch.is_tensor(vf_clipfrac) else vf_clipfrac
        metrics = {
            "critic/vf_loss": float(vf_loss.detach().item()),
            "critic/vf_clipfrac": float(clipfrac),
            "critic/vpred_mean": float(masked_mean(vpreds.detach(), response_mask).item()),
        }
        return vf_loss, metrics, {"vf_loss": vf_loss}

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
        require_batch_keys(data.batch, keys, who)
        keys += [k for k in ("position_ids", "response_mask") if k in data.batch.keys()]
        return run_mini_batch_updates(
            self.critic_module,
            self.critic_optimizer,
            self.lr_scheduler,
            cfg,
            data.batch.select(*keys),
            global_step,
            "critic",
            partial(
                self._micro_loss,
                cliprange_value=float(cfg.cliprange_value),
                loss_agg_mode=str(cfg.loss_agg_mode),
            ),
        )
