"""The PPO actor of one data-parallel rank: response log-probs and the clipped policy-gradient update.

The module may be a plain ``nn.Module``, a transformers model, or either sharded with FSDP2: gradients of all
ranks are averaged by the sharding wrapper, so this file only sees its own share of the batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict

from verl.algorithms.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.algorithms.registry import needs_groups, needs_log_z, needs_reference, per_response
from verl.algorithms.rollout_correction import LogProbGapSums
from verl.base_config import omega_conf_to_dataclass
from verl.models.vlm import vision_forward_kwargs
from verl.utils.logprob_kernels import ChunkKernels
from verl.utils.prefix_grouper_checks import refusal as prefix_grouper_refusal
from verl.workers.actor.base import BasePPOActor
from verl.workers.actor.fused_head import output_head
from verl.workers.actor.log_z import prompt_log_z
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
from verl.workers.actor.prefix_grouping import grouped_response_forward
from verl.workers.actor.response_forward import (
    response_logits_forward,
    sequence_parallel_response_forward,
)
from verl.workers.config import ActorConfig

if TYPE_CHECKING:
    from verl.protocol import DataProto


# batch key of a row's index into ``non_tensor_batch["multi_modal_inputs"]`` (travels with the row through
# micro-batching)
MULTI_MODAL_ROW_KEY = "multi_modal_row"


# batch keys of a row's prompt group (0-based, by first appearance) and of that group's response count, for the
# losses that compare the responses of a group (loss_mode=gvpo, online_dpo)
GROUP_INDEX_KEY = "group_index"
GROUP_SIZE_KEY = "group_size"


def _grouped_rows(data: DataProto, batch: TensorDict, loss_mode: str, who: str) -> TensorDict:
    """``batch`` with its rows ordered group by group (stable) and each row's :data:`GROUP_INDEX_KEY` and
    :data:`GROUP_SIZE_KEY` added, from ``non_tensor_batch["uid"]``: contiguous mini- and micro-batches of whole
    groups then hold whole groups (the loss checks that they do)."""
    uids = data.non_tensor_batch.get("uid")
    if uids is None:
        raise KeyError(f"{who}: loss_mode={loss_mode} centres over prompt groups and needs non_tensor_batch['uid']")
    first: dict[Any, int] = {}
    index = torch.tensor([first.setdefault(u, len(first)) for u in uids.tolist()], dtype=torch.long)
    order = torch.sort(index, stable=True).indices
    batch = batch[order.to(batch.device)]
    index = index[order]
    batch[GROUP_INDEX_KEY] = index.to(batch.device)
    batch[GROUP_SIZE_KEY] = torch.bincount(index)[index].to(batch.device)
    return batch


def _require_meta(data: DataProto, key: str, who: str) -> Any:
    if key not in data.meta_info:
        raise KeyError(f"{who}: data.meta_info has no {key!r} (keys: {sorted(data.meta_info)}); the worker sets it")
    return data.meta_info[key]


def activation_offload(enabled: bool, device_type: str) -> contextlib.AbstractContextManager:
    """``model.enable_activation_offload``: the tensors autograd saves during a training forward go to pinned CPU
    memory and come back for the backward (``torch.autograd.graph.save_on_cpu``). Only on an accelerator: on CPU the
    activations are already in host memory, so this is a null context there (and when not enabled)."""
    if enabled and device_type != "cpu":
        return torch.autograd.graph.save_on_cpu(pin_memory=True)
    return contextlib.nullcontext()


class DataParallelPPOActor(BasePPOActor):
    """PPO actor on one data-parallel rank (verl's ``dp_actor``).

    Batch sizes are per rank and in sequences: ``config.ppo_mini_batch_size`` is the number of sequences per
    mini-batch on this rank. The worker converts the user's value (prompts) before building the actor:
    ``ppo_mini_batch_size * rollout.n // world_size``. ``ppo_micro_batch_size_per_gpu`` counts sequences per
    forward/backward; with ``use_dynamic_bsz`` micro-batches are instead packed to ``ppo_max_token_len_per_gpu``
    valid tokens.

    Args:
        config: the ``actor_rollout_ref.actor`` section (DictConfig, dict or dataclass).
        actor_module: the policy; any module accepted by ``verl.models.loader.forward_logits``.
        actor_optimizer: needed for ``update_policy`` only (a reference policy has none).
        lr_scheduler: reported in ``actor/lr``; the worker steps it.
        use_remove_padding: pack valid tokens into one row (``actor_rollout_ref.model.use_remove_padding``); the
            config key ``use_remove_padding`` is read when this is None. Needs a transformers model.
        use_fused_kernels: log-probs and entropy through the LM head in token chunks, no ``[bs, seq, vocab]``
            logits (``actor_rollout_ref.model.use_fused_kernels``); needs a transformers causal LM.
        log_prob_kernels: the per-chunk kernels of the log-probs and entropy (None: eager; the worker passes the
            compiled set where ``use_torch_compile`` resolves on, :mod:`verl.utils.logprob_kernels`).
    """

    def __init__(
        self,
        config: ActorConfig | Mapping[str, Any],
        actor_module: torch.nn.Module,
        actor_optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler: Any | None = None,
        use_remove_padding: bool | None = None,
        sp_group: Any = None,
        offload_activations: bool = False,
        use_fused_kernels: bool = False,
        log_prob_kernels: ChunkKernels | None = None,
    ) -> None:
        super().__init__(omega_conf_to_dataclass(config, ActorConfig))
        # actor_rollout_ref.model.enable_activation_offload: training forwards keep their activations on the host
        self.offload_activations = offload_activations
        # Ulysses: the process group over which each sequence is split (None: whole sequences on this rank)
        self.sp_group = sp_group
        self.actor_module = actor_module
        self.actor_optimizer = actor_optimizer
        self.lr_scheduler = lr_scheduler
        if use_remove_padding is None:
            use_remove_padding = bool(self.config.get("use_remove_padding"))  # a +key extra; the worker passes it
        self.use_remove_padding = bool(use_remove_padding)
        # actor.entropy_from_logits_with_chunking: entropy in fixed blocks of 2048 tokens (upstream's), else automatic
        self.entropy_chunk_size = (
            int(self.config.entropy_from_logits_chunk_size) if self.config.entropy_from_logits_with_chunking else None
        )
        enable_input_grads_for_checkpointing(actor_module)
        self.use_fused_kernels = bool(use_fused_kernels)
        self.log_prob_kernels = log_prob_kernels
        if self.use_fused_kernels:
            output_head(actor_module)  # refuses, naming the key, a model without a separable LM head
        # actor.use_prefix_grouper: one forward of each prompt group's shared prompt (actor/prefix_grouping.py)
        self.use_prefix_grouper = bool(self.config.use_prefix_grouper)
        if self.use_prefix_grouper:
            line = prefix_grouper_refusal(self.use_remove_padding, sp_group is not None, self.use_fused_kernels)
            if line is not None:
                raise ValueError(line)

    # ------------------------------------------------------------------------------------------------ forward
    @staticmethod
    def _multi_modal_rows(data: DataProto, batch: TensorDict) -> list[Any] | None:
        """The per-row ``multi_modal_inputs`` of a batch with images (None without). Each row's index goes into
        ``batch`` as :data:`MULTI_MODAL_ROW_KEY`, so any split, shuffle or token-balanced regrouping of the rows
        keeps each sample's images with it."""
        rows = data.non_tensor_batch.get("multi_modal_inputs")
        if rows is None or not any(bool(r) for r in rows):
            return None
        batch[MULTI_MODAL_ROW_KEY] = torch.arange(len(rows), device=batch.device)
        return list(rows)

    def _forward_micro_batch(
        self,
        micro: TensorDict,
        temperature: float,
        calculate_entropy: bool,
        entropy_requires_grad: bool = False,
        multi_modal_rows: list[Any] | None = None,
        calculate_sum_pi_squared: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        device = module_device(self.actor_module)
        extra_inputs = None
        if multi_modal_rows is not None:
            if self.sp_group is not None:
                raise ValueError("Ulysses sequence parallelism does not support vision-language inputs yet")
            rows = [multi_modal_rows[i] for i in micro[MULTI_MODAL_ROW_KEY].tolist()]
            extra_inputs = vision_forward_kwargs(self.actor_module, micro["input_ids"], micro["attention_mask"], rows)
        if self.use_prefix_grouper:
            if multi_modal_rows is not None:
                raise ValueError(prefix_grouper_refusal(False, False, False, multi_modal=True))
            with autocast_context(device, self.config.dtype):
                return grouped_response_forward(
                    self.actor_module,
                    micro,
                    temperature,
                    calculate_entropy,
                    entropy_requires_grad,
                    calculate_sum_pi_squared=calculate_sum_pi_squared,
                    entropy_chunk_size=self.entropy_chunk_size,
                    kernels=self.log_prob_kernels,
                )
        with autocast_context(device, self.config.dtype):
            if self.sp_group is not None:
                import torch.distributed as dist

                return sequence_parallel_response_forward(
                    self.actor_module,
                    micro,
                    temperature,
                    calculate_entropy,
                    entropy_requires_grad,
                    self.use_remove_padding,
                    self.sp_group,
                    grad_scale=float(dist.get_world_size(self.sp_group)),
                    calculate_sum_pi_squared=calculate_sum_pi_squared,
                    entropy_chunk_size=self.entropy_chunk_size,
                    fused=self.use_fused_kernels,
                    kernels=self.log_prob_kernels,
                )
            return response_logits_forward(
                self.actor_module,
                micro,
                temperature,
                calculate_entropy,
                entropy_requires_grad,
                self.use_remove_padding,
                extra_inputs=extra_inputs,
                calculate_sum_pi_squared=calculate_sum_pi_squared,
                entropy_chunk_size=self.entropy_chunk_size,
                fused=self.use_fused_kernels,
                kernels=self.log_prob_kernels,
            )

    def compute_log_prob(
        self, data: DataProto, calculate_entropy: bool = False, calculate_sum_pi_squared: bool = False
    ) -> tuple[torch.Tensor, ...]:
        """Log-probs of ``responses`` under the tempered policy, without gradients.

        Reads ``input_ids``, ``attention_mask``, ``position_ids`` ``[bs, seqlen]`` and ``responses``
        ``[bs, response_len]`` from ``data.batch``; ``temperature`` (required), ``micro_batch_size``,
        ``use_dynamic_bsz`` and ``max_token_len`` from ``data.meta_info``; a vision-language batch's
        ``multi_modal_inputs`` from ``data.non_tensor_batch``.

        Returns:
            ``(log_probs [bs, response_len], entropys [bs, response_len] | None)`` in the input row order,
            ``log p(y_t) = log_softmax(logits_{t-1} / temperature)[y_t]``; with ``calculate_sum_pi_squared`` a
            third item ``sum_v pi_t(v)^2`` ``[bs, response_len]`` (actor.calculate_sum_pi_squared).
        """
        who = "DataParallelPPOActor.compute_log_prob"
        temperature = float(_require_meta(data, "temperature", who))
        if temperature <= 0:
            raise ValueError(f"{who}: meta_info['temperature'] must be > 0 for log-probs, got {temperature}")
        keys = ["input_ids", "attention_mask", "responses"]
        require_batch_keys(data.batch, keys, who)
        if "position_ids" in data.batch.keys():
            keys.append("position_ids")
        batch = data.batch.select(*keys)
        mm_rows = self._multi_modal_rows(data, batch)
        outputs, order = forward_micro_batches_no_grad(
            self.actor_module,
            batch,
            data.meta_info,
            lambda micro: self._forward_micro_batch(
                micro,
                temperature,
                calculate_entropy,
                multi_modal_rows=mm_rows,
                calculate_sum_pi_squared=calculate_sum_pi_squared,
            ),
            group_prompts=self.use_prefix_grouper,
        )
        log_prob = restore_order(torch.cat([out[0] for out in outputs], dim=0), order)
        entropy = restore_order(torch.cat([out[1] for out in outputs], dim=0), order) if calculate_entropy else None
        if calculate_sum_pi_squared:
            return log_prob, entropy, restore_order(torch.cat([out[2] for out in outputs], dim=0), order)
        return log_prob, entropy

    # ------------------------------------------------------------------------------------------------- update
    def _micro_loss(
        self,
        micro: TensorDict,
        temperature: float,
        loss_agg_mode: str,
        multi_modal_rows: list[Any] | None = None,
        rollout_correction: dict[str, Any] | None = None,
        gap: LogProbGapSums | None = None,
        calculate_entropy: bool = True,
    ) -> tuple[torch.Tensor, dict[str, float], dict[str, torch.Tensor | None]]:
        """The policy loss of one micro-batch (aggregated with ``loss_agg_mode``) and its metrics. With
        ``rollout_correction`` (bypass mode asking for a correction) the loss is upstream's ``bypass_mode``. With
        ``gap`` the rollout-vs-trainer log-prob gap of the micro-batch is added to it while no optimizer step has
        changed the weights yet (the log-probs are then those of the policy the rollout was meant to match)."""
        cfg = self.config
        entropy_coeff = cfg.entropy_coeff
        response_mask = response_mask_of(micro).to(torch.float32)
        with activation_offload(self.offload_activations, module_device(self.actor_module).type):
            log_prob, entropy = self._forward_micro_batch(
                micro,
                temperature,
                calculate_entropy=calculate_entropy,
                entropy_requires_grad=entropy_coeff != 0,
                multi_modal_rows=multi_modal_rows,
            )
        if gap is not None and "rollout_log_probs" in micro.keys() and self._weights_version() == self._gap_from:
            gap.add(log_prob, micro["rollout_log_probs"], response_mask)
        loss_mode = cfg.policy_loss.loss_mode
        # exactly on-policy updates may leave out old_log_probs: the behaviour policy is the current one, so the
        # ratio is 1 by construction (the driver skips the separate forward that would recompute it)
        old_log_prob = micro["old_log_probs"] if "old_log_probs" in micro.keys() else log_prob.detach()
        loss_kwargs: dict[str, Any] = {}
        if rollout_correction is not None:
            loss_mode, loss_kwargs = "bypass_mode", {"rollout_correction": rollout_correction}
        loss_fn = get_policy_loss_fn(loss_mode)
        if needs_groups(loss_fn):
            loss_kwargs.update(group_index=micro[GROUP_INDEX_KEY], group_size=micro[GROUP_SIZE_KEY])
        if needs_reference(loss_fn):
            loss_kwargs["ref_log_prob"] = micro["ref_log_prob"]
        if needs_log_z(loss_fn):
            if multi_modal_rows is not None:
                raise ValueError(
                    f"loss_mode={loss_mode} does not support vision-language inputs yet (log Z's prompt pass)"
                )
            device = module_device(self.actor_module)
            with activation_offload(self.offload_activations, device.type), autocast_context(device, cfg.dtype):
                loss_kwargs["log_z"] = prompt_log_z(self.actor_module, micro)
        pg_loss, pg_metrics = loss_fn(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=micro["advantages"],
            response_mask=response_mask,
            loss_agg_mode=loss_agg_mode,
            config=cfg,
            rollout_is_weights=micro["rollout_is_weights"] if "rollout_is_weights" in micro.keys() else None,
            **loss_kwargs,
        )
        policy_loss = pg_loss
        scale = cfg.loss_scale_factor
        entropy_loss = None
        if entropy is not None:
            entropy_loss = agg_loss(
                loss_mat=entropy, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, loss_scale_factor=scale
            )
        if entropy_coeff != 0:
            # Entropy bonus: maximising entropy means subtracting it from the loss.
            policy_loss = policy_loss - entropy_coeff * entropy_loss
        kl_loss = None
        if cfg.use_kl_loss:
            kld = kl_penalty(log_prob, micro["ref_log_prob"], cfg.kl_loss_type)
            kl_loss = agg_loss(
                loss_mat=kld, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, loss_scale_factor=scale
            )
            policy_loss = policy_loss + cfg.kl_loss_coef * kl_loss
        metrics: dict[str, float] = {"actor/pg_loss": float(pg_loss.detach().item())}
        if entropy_loss is not None:
            metrics["actor/entropy"] = float(entropy_loss.detach().item())
        if kl_loss is not None:
            metrics["actor/kl_loss"] = float(kl_loss.detach().item())
            metrics["actor/kl_coef"] = cfg.kl_loss_coef
        for name, value in (pg_metrics or {}).items():
            # upstream keeps a loss's own prefixes (the bypass loss's rollout_corr/*); bare names go under actor/
            key = name if name.startswith(("actor/", "rollout_corr/")) else f"actor/{name}"
            metrics[key] = float(value.detach().float().mean().item()) if torch.is_tensor(value) else float(value)
        parts = {"pg_loss": pg_loss.detach(), "kl_loss": kl_loss}
        parts["entropy"] = entropy_loss.detach() if entropy_loss is not None else None
        return policy_loss, metrics, parts

    def update_policy(self, data: DataProto) -> dict[str, list[float]]:
        """``ppo_epochs`` x mini-batches x micro-batches of PPO, one optimizer step per mini-batch.

        Loss per micro-batch: ``pg_loss - entropy_coeff * entropy + kl_loss_coef * kl(log_prob, ref_log_prob)``,
        each term aggregated with ``loss_agg_mode``; it is scaled by the micro-batch's share of the mini-batch
        (tokens for ``token-mean``, sequences otherwise) so accumulated gradients equal those of the whole
        mini-batch. The gradient norm is clipped to ``grad_clip``; a non-finite norm skips the step (counted in
        ``actor/grad_norm_nonfinite``); a non-finite loss raises RuntimeError.

        Reads ``responses``, ``input_ids``, ``attention_mask``, ``position_ids``, ``old_log_probs`` (optional when
        ``meta_info["on_policy"]``: then the current log-probs, detached, are the behaviour policy's), ``advantages``,
        ``response_mask`` (and ``ref_log_prob`` with ``use_kl_loss``, ``rollout_is_weights`` if present) from
        ``data.batch``; ``temperature``, ``global_steps`` and (bypass mode with a correction, set by the driver)
        ``rollout_correction`` from ``data.meta_info``.

        Returns:
            metric name -> list of values: per mini-batch for the losses (mini-batch values), ``actor/grad_norm``,
            ``actor/pg_clipfrac`` etc.; once per call for ``actor/lr`` and ``actor/grad_norm_nonfinite``.
        """
        who = "DataParallelPPOActor.update_policy"
        if self.actor_optimizer is None:
            raise RuntimeError(f"{who}: this actor was built without an optimizer (a reference policy?)")
        cfg = self.config
        temperature = float(_require_meta(data, "temperature", who))
        if temperature <= 0:
            raise ValueError(f"{who}: meta_info['temperature'] must be > 0, got {temperature}")
        global_step = data.meta_info.get("global_steps", "unknown")
        keys = ["responses", "input_ids", "attention_mask", "advantages"]
        loss_fn = get_policy_loss_fn(cfg.policy_loss.loss_mode)
        if cfg.use_kl_loss or needs_reference(loss_fn):
            keys.append("ref_log_prob")
        require_batch_keys(data.batch, keys, who)
        if "old_log_probs" not in data.batch.keys() and not data.meta_info.get("on_policy", False):
            raise KeyError(
                f"{who}: data.batch has no 'old_log_probs' (compute_log_prob first); only an exactly on-policy "
                "update (meta_info['on_policy']=True: one epoch, one mini-batch) may leave them out"
            )
        for optional in ("old_log_probs", "position_ids", "response_mask", "rollout_is_weights"):
            if optional in data.batch.keys():
                keys.append(optional)
        # the driver measured no rollout-vs-trainer gap (no old-log-prob pass): measure it on the first forward
        gap = (
            LogProbGapSums()
            if data.meta_info.get("log_prob_gap") and "rollout_log_probs" in data.batch.keys()
            else None
        )
        if gap is not None:
            keys.append("rollout_log_probs")
            self._gap_from = self._weights_version()
        loss_agg_mode = cfg.loss_agg_mode
        # actor.calculate_entropy (upstream's key): the entropy is needed for the loss (entropy_coeff) and, on a step
        # without an old-log-prob pass, for actor/entropy (no other forward of this step can report it)
        calculate_entropy = cfg.calculate_entropy or cfg.entropy_coeff != 0 or "old_log_probs" not in data.batch.keys()
        batch = data.batch.select(*keys)
        mm_rows = self._multi_modal_rows(data, batch)
        if needs_groups(loss_fn):
            batch = _grouped_rows(data, batch, cfg.policy_loss.loss_mode, who)
        metrics = run_mini_batch_updates(
            self.actor_module,
            self.actor_optimizer,
            self.lr_scheduler,
            cfg,
            batch,
            global_step,
            "actor",
            partial(
                self._micro_loss,
                temperature=temperature,
                loss_agg_mode=loss_agg_mode,
                multi_modal_rows=mm_rows,
                rollout_correction=data.meta_info.get("rollout_correction"),
                gap=gap,
                calculate_entropy=calculate_entropy,
            ),
            group_prompts=self.use_prefix_grouper,
            share_by_rows=per_response(loss_fn),
        )
        if gap is not None:
            metrics.update({f"rollout_corr/{k}": [v] for k, v in gap.metrics().items()})
        return metrics

    def _weights_version(self) -> int:
        """A counter that every in-place change of the first parameter (an optimizer step) advances."""
        return int(next(self.actor_module.parameters())._version)
