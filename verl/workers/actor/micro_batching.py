"""Plumbing shared by the actor and the critic of one data-parallel rank.

Micro-batch splitting (fixed size or token-budgeted), the loss share that makes gradient accumulation reproduce the
mini-batch loss exactly, autocast, the clipped optimizer step that skips non-finite gradients, and the two loops
built on them: the gradient-free forward over micro-batches and the epochs x mini-batches x micro-batches update.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from tensordict import TensorDict

from verl.hardware.precision import resolve_dtype
from verl.utils.device import module_compute_device
from verl.utils.seeding import keyed_seed
from verl.utils.seqlen_balancing import get_reverse_idx, rearrange_micro_batches
from verl.workers.actor.prefix_grouping import split_grouped_micro_batches
from verl.workers.config import ActorConfig, CriticConfig

# One micro-batch's training step as seen by the update loop: (loss to backpropagate, metric values, named loss parts
# for the non-finite-loss error message).
# ``micro_loss(micro) -> (loss, metrics, parts)``: ``parts`` are the loss terms aggregated with ``loss_agg_mode``
# (``pg_loss``, ``entropy``, ...); a metric named ``<role>/<key of parts>`` is such a term, every other metric is a
# mean over the micro-batch's response tokens (clip fractions, ``ppo_kl``, value means). The two are weighted into
# mini-batch values differently, so no metric depends on how the mini-batch was split.
MicroLossFn = Callable[[TensorDict], tuple[torch.Tensor, Mapping[str, float], Mapping[str, Any]]]

# Aggregation modes whose mini-batch value is a mean over tokens; every other mode averages over sequences.
_TOKEN_MEAN_MODES = ("token-mean",)


def module_device(module: torch.nn.Module) -> torch.device:
    """The device the module computes on (:func:`verl.utils.device.module_compute_device`: the first parameter's,
    or an FSDP2 mesh's GPU when its shards are offloaded to CPU); CPU for a parameterless module."""
    return module_compute_device(module)


def autocast_context(device: torch.device, dtype_name: str) -> AbstractContextManager:
    """bf16 autocast on ``device`` for ``dtype_name='bfloat16'`` (or ``auto`` where bf16 is native); nothing for fp32.

    Master weights and optimizer state stay in float32 either way; only matmuls run in bf16. float16 is refused:
    it would need a gradient scaler, which the actor and critic do not run.
    """
    dtype = resolve_dtype(str(dtype_name), device)
    if dtype == torch.float32:
        return nullcontext()
    if dtype == torch.float16:
        raise ValueError("dtype=float16 is not supported for training (no gradient scaler); use bfloat16 or float32")
    return torch.autocast(device_type=device.type, dtype=dtype)


def split_micro_batches(
    batch: TensorDict,
    micro_batch_size: int | None,
    use_dynamic_bsz: bool,
    max_token_len: int | None,
    group_prompts: bool = False,
) -> tuple[list[TensorDict], list[int] | None]:
    """Micro-batches of ``batch``: fixed ``micro_batch_size`` rows, or packed to ``max_token_len`` valid tokens.

    With ``group_prompts`` (``actor.use_prefix_grouper``) the rows of a prompt group stay together and a group's
    prompt counts once against ``max_token_len``
    (:func:`~verl.workers.actor.prefix_grouping.split_grouped_micro_batches`).

    Returns ``(micro_batches, order)``; ``order`` is None for fixed splits (input order is kept) and otherwise the
    input row of each concatenated micro-batch row, to be undone with :func:`restore_order`.
    """
    if group_prompts:
        return split_grouped_micro_batches(batch, micro_batch_size, use_dynamic_bsz, max_token_len)
    if use_dynamic_bsz:
        if max_token_len is None or int(max_token_len) <= 0:
            raise ValueError(f"use_dynamic_bsz needs a positive max_token_len, got {max_token_len!r}")
        micro_batches, partitions = rearrange_micro_batches(batch, int(max_token_len))
        return micro_batches, [i for p in partitions for i in p]
    n = int(batch.batch_size[0])
    size = n if micro_batch_size is None else int(micro_batch_size)
    if size <= 0:
        raise ValueError(f"micro batch size must be a positive number of sequences, got {micro_batch_size!r}")
    return list(batch.split(size)), None


def restore_order(concatenated: torch.Tensor, order: list[int] | None) -> torch.Tensor:
    """Undo the row permutation of dynamic micro-batching: row ``i`` of the result is input row ``i``."""
    if order is None:
        return concatenated
    reverse = torch.tensor(get_reverse_idx(order), dtype=torch.long, device=concatenated.device)
    return concatenated[reverse]


def response_mask_of(batch: TensorDict) -> torch.Tensor:
    """``response_mask`` ``[bs, response_len]``, or the response part of ``attention_mask`` when it is absent."""
    if "response_mask" in batch.keys():
        return batch["response_mask"]
    response_length = batch["responses"].shape[-1]
    return batch["attention_mask"][:, -response_length:]


def loss_share(micro_mask: torch.Tensor, mini_tokens: float, mini_seqs: int, loss_agg_mode: str) -> float:
    """Weight of a micro-batch's aggregated loss in its mini-batch loss.

    For ``token-mean`` the mini-batch loss is ``sum(loss * mask) / mini_tokens`` and a micro-batch's token-mean is
    ``sum_micro / micro_tokens``, so the weight is ``micro_tokens / mini_tokens``; for the sequence-mean modes the
    weight is ``micro_seqs / mini_seqs``. Summing weighted micro-batch gradients then equals the gradient of the
    mini-batch loss, whatever the micro-batch split (fixed or dynamic).

    ``token-sum`` is already a sum, so micro-batch losses add up unweighted; the weight is the data-parallel world
    size, because FSDP averages the ranks' gradients and the mini-batch loss is the sum over *all* ranks' tokens
    (upstream verl multiplies by ``dp_size`` for the same reason).
    """
    if loss_agg_mode == "token-sum":
        return float(_dp_world_size())
    if loss_agg_mode in _TOKEN_MEAN_MODES:
        return float(micro_mask.sum().item()) / max(float(mini_tokens), 1.0)
    return float(micro_mask.shape[0]) / float(max(mini_seqs, 1))


def _dp_world_size() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1


def metric_share(micro_mask: torch.Tensor, mini_tokens: float, mini_seqs: int, loss_agg_mode: str) -> float:
    """Weight of a micro-batch's metric values in the mini-batch's: :func:`loss_share`, except for ``token-sum``
    (whose loss weight is not a fraction), where metrics are averaged over the micro-batches by their tokens."""
    if loss_agg_mode == "token-sum":
        return loss_share(micro_mask, mini_tokens, mini_seqs, "token-mean")
    return loss_share(micro_mask, mini_tokens, mini_seqs, loss_agg_mode)


def dp_mean_token_count(mask: torch.Tensor) -> float:
    """Valid tokens of a mini-batch (``mask`` ``[bs, response_len]``) averaged over the data-parallel ranks.

    Used as ``mini_tokens`` in :func:`loss_share` so that ``token-mean`` is a mean over the *global* mini-batch:
    FSDP averages the ranks' gradients, so rank ``r`` must weigh its token sum by ``world / global_tokens``, i.e.
    divide by ``global_tokens / world``. Dividing by the local count instead would give each rank's tokens a
    weight inversely proportional to that rank's token count whenever ranks hold responses of different lengths.
    Without torch.distributed (one process) this is just ``mask.sum()``. Collective: every rank calls it once per
    mini-batch.
    """
    local = float(mask.sum().item())
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return local
    world = torch.distributed.get_world_size()
    if world == 1:
        return local
    total = torch.tensor([local], dtype=torch.float64, device=mask.device)
    torch.distributed.all_reduce(total)
    return float(total.item()) / world


def check_finite_loss(loss: torch.Tensor, who: str, global_step: Any, epoch: int, mini: int, micro: int, **parts):
    """Raise RuntimeError when ``loss`` is NaN/inf, naming the step, epoch, mini- and micro-batch and loss parts.

    Under torch.distributed the verdict is agreed on by all ranks (one scalar all-reduce): a rank that raised alone
    would leave the others blocked in the next FSDP collective instead of stopping.
    """
    local_bad = not bool(torch.isfinite(loss).all())
    any_bad = local_bad
    if (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    ):
        flag = torch.tensor([1.0 if local_bad else 0.0], device=loss.device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        any_bad = bool(flag.item() > 0)
    if not any_bad:
        return
    detail = ", ".join(
        f"{k}={float(v.detach()) if torch.is_tensor(v) else float(v):.6g}" for k, v in parts.items() if v is not None
    )
    where = "" if local_bad else " on another data-parallel rank"
    raise RuntimeError(
        f"{who}: non-finite loss{where} {float(loss.detach().float().item())} at global step {global_step}, "
        f"epoch {epoch}, "
        f"mini-batch {mini}, micro-batch {micro} ({detail}); check the inputs (advantages, log-probs, values) and "
        f"the learning rate"
    )


def clip_grad_and_step(
    module: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float | None
) -> tuple[float, bool]:
    """Clip the global gradient norm to ``grad_clip`` and step; a non-finite norm skips the step.

    Returns ``(grad_norm, stepped)``. The norm is computed over all trainable parameters (sharded DTensor
    parameters give the global norm); ``grad_clip`` None or <= 0 only measures it. After a skip the gradients are
    zeroed so they cannot leak into the next step.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    max_norm = float(grad_clip) if grad_clip is not None and float(grad_clip) > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
    if hasattr(grad_norm, "full_tensor"):
        grad_norm = grad_norm.full_tensor()
    norm = float(grad_norm.item()) if isinstance(grad_norm, torch.Tensor) else float(grad_norm)
    if not math.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        return norm, False
    optimizer.step()
    return norm, True


def current_lr(optimizer: torch.optim.Optimizer | None, lr_scheduler: Any | None) -> float | None:
    """The learning rate in use: the scheduler's last value, else the optimizer's first param group."""
    if lr_scheduler is not None and hasattr(lr_scheduler, "get_last_lr"):
        return float(lr_scheduler.get_last_lr()[0])
    if optimizer is not None and optimizer.param_groups:
        return float(optimizer.param_groups[0]["lr"])
    return None


def iter_mini_batches(
    batch: TensorDict, mini_batch_size: int, epoch: int, shuffle: bool, seed: int
) -> Iterator[tuple[int, TensorDict]]:
    """Consecutive mini-batches of ``mini_batch_size`` rows (the last may be smaller), optionally shuffled per epoch.

    The shuffle permutation comes from a generator seeded by ``(seed, epoch)`` so all ranks and reruns agree.
    """
    n = int(batch.batch_size[0])
    if mini_batch_size <= 0:
        raise ValueError(f"ppo_mini_batch_size must be a positive number of sequences, got {mini_batch_size}")
    if shuffle:
        gen = torch.Generator().manual_seed(keyed_seed(int(seed), epoch))
        batch = batch[torch.randperm(n, generator=gen)]
    for idx, start in enumerate(range(0, n, mini_batch_size)):
        yield idx, batch[start : start + mini_batch_size]


def enable_input_grads_for_checkpointing(module: torch.nn.Module) -> None:
    """Make reentrant gradient checkpointing see a grad-requiring input when the embeddings are frozen (LoRA).

    With ``use_reentrant=True`` a checkpointed block whose inputs do not require grad produces outputs without a
    graph, silently dropping the gradients of the parameters inside it; transformers' ``enable_input_require_grads``
    marks the embedding output as requiring grad to prevent that. transformers 5.x already does this inside
    ``gradient_checkpointing_enable`` (it keeps the hook in ``_require_grads_hook``); this covers modules where the
    checkpointing was switched on otherwise, without registering a second hook.
    """
    if not getattr(module, "is_gradient_checkpointing", False) or hasattr(module, "_require_grads_hook"):
        return
    get_emb = getattr(module, "get_input_embeddings", None)
    emb = get_emb() if callable(get_emb) else None
    if emb is None or any(p.requires_grad for p in emb.parameters()):
        return
    if hasattr(module, "enable_input_require_grads"):
        module.enable_input_require_grads()


def require_batch_keys(batch: TensorDict, keys: list[str], who: str) -> None:
    """Raise KeyError naming ``who`` and the missing ``keys`` when ``batch`` lacks any of them."""
    missing = [k for k in keys if k not in batch.keys()]
    if missing:
        raise KeyError(f"{who}: data.batch lacks {missing}; it has {sorted(batch.keys())}")


def forward_micro_batches_no_grad(
    module: torch.nn.Module,
    batch: TensorDict,
    meta_info: Mapping[str, Any],
    forward: Callable[[TensorDict], Any],
    group_prompts: bool = False,
) -> tuple[list[Any], list[int] | None]:
    """Run ``forward`` on each micro-batch of ``batch`` in eval mode without gradients.

    Micro-batches follow ``meta_info``'s ``micro_batch_size``, ``use_dynamic_bsz`` and ``max_token_len`` (keeping
    prompt groups whole with ``group_prompts``, see :func:`split_micro_batches`) and are moved to the module's
    device first; the module's train/eval mode is restored afterwards, even on error.
    Returns ``(outputs, order)``: one output per micro-batch, and the row order to hand to :func:`restore_order`
    after concatenating them.
    """
    micro_batches, order = split_micro_batches(
        batch,
        meta_info.get("micro_batch_size"),
        bool(meta_info.get("use_dynamic_bsz", False)),
        meta_info.get("max_token_len"),
        group_prompts,
    )
    device = module_device(module)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            outputs = [forward(micro.to(device)) for micro in micro_batches]
    finally:
        module.train(was_training)
    return outputs, order


def run_mini_batch_updates(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: Any | None,
    config: ActorConfig | CriticConfig,
    batch: TensorDict,
    global_step: Any,
    role: str,
    micro_loss: MicroLossFn,
    group_prompts: bool = False,
    share_by_rows: bool = False,
) -> dict[str, list[float]]:
    """``ppo_epochs`` x mini-batches x micro-batches of gradient accumulation, one optimizer step per mini-batch.

    Each micro-batch's loss from ``micro_loss`` is checked for NaN/inf, scaled by the micro-batch's
    :func:`loss_share` of its mini-batch (``loss_agg_mode``; tokens averaged over data-parallel ranks) and
    backpropagated, so the accumulated gradient equals the mini-batch loss's. The step clips to ``grad_clip`` and
    is skipped on a non-finite norm. Reads ``ppo_epochs``, ``ppo_mini_batch_size`` (rows of ``batch`` on this rank),
    ``shuffle``, ``ppo_micro_batch_size_per_gpu``, ``use_dynamic_bsz``, ``ppo_max_token_len_per_gpu`` and
    ``grad_clip`` from ``config``; the shuffles are seeded by ``data_loader_seed`` and ``global_step`` (when an
    int). ``group_prompts`` keeps each prompt group's rows of a mini-batch in one micro-batch
    (``actor.use_prefix_grouper``). ``share_by_rows`` weighs each micro-batch by its rows whatever
    ``loss_agg_mode`` says (a loss of one term per response, ``gvpo`` or ``sppo``, as their recipes weigh
    micro-batches).

    Returns metric name -> values: each of ``micro_loss``'s metrics as its mini-batch value (a loss term weighted by
    its :func:`loss_share`, a token mean by the micro-batch's share of the tokens; see ``MicroLossFn``) and
    ``{role}/grad_norm``, one per mini-batch; ``{role}/grad_norm_nonfinite`` (skipped steps) and ``{role}/lr``
    once.
    """
    # the mode that weighs micro-batches into their mini-batch (each micro-batch aggregates with config.loss_agg_mode)
    loss_agg_mode = "seq-mean-token-mean" if share_by_rows else str(config.loss_agg_mode)
    mini_batch_size = int(config.ppo_mini_batch_size)
    use_dynamic_bsz = bool(config.use_dynamic_bsz)
    micro_batch_size = config.ppo_micro_batch_size_per_gpu
    max_token_len = config.ppo_max_token_len_per_gpu
    device = module_device(module)
    # the shuffles of step t draw from (data_loader_seed, t, epoch): the same run repeats them, another seed differs
    seed = keyed_seed(int(config.data_loader_seed), int(global_step) if isinstance(global_step, int) else 0)

    module.train()
    metrics: dict[str, list[float]] = defaultdict(list)
    skipped = 0
    for epoch in range(int(config.ppo_epochs)):
        for mini_idx, mini in iter_mini_batches(batch, mini_batch_size, epoch, bool(config.shuffle), seed):
            mini_mask = response_mask_of(mini)
            mini_tokens = dp_mean_token_count(mini_mask)
            local_tokens = max(float(mini_mask.sum().item()), 1.0)
            micro_batches, _ = split_micro_batches(
                mini, micro_batch_size, use_dynamic_bsz, max_token_len, group_prompts
            )
            optimizer.zero_grad(set_to_none=True)
            mini_metrics: dict[str, float] = defaultdict(float)
            for micro_idx, micro in enumerate(micro_batches):
                micro = micro.to(device)
                micro_mask = response_mask_of(micro)
                share = loss_share(micro_mask, mini_tokens, len(mini), loss_agg_mode)
                weight = metric_share(micro_mask, mini_tokens, len(mini), loss_agg_mode)
                loss, micro_metrics, parts = micro_loss(micro)
                check_finite_loss(loss, role, global_step, epoch, mini_idx, micro_idx, **parts)
                (loss * share).backward()
                token_share = float(micro_mask.sum().item()) / local_tokens
                aggregated = {f"{role}/{name}" for name in parts}
                for name, value in micro_metrics.items():
                    mini_metrics[name] += (weight if name in aggregated else token_share) * value
            grad_norm, stepped = clip_grad_and_step(module, optimizer, config.grad_clip)
            skipped += 0 if stepped else 1
            for name, value in mini_metrics.items():
                metrics[name].append(value)
            metrics[f"{role}/grad_norm"].append(grad_norm)
    optimizer.zero_grad(set_to_none=True)
    metrics[f"{role}/grad_norm_nonfinite"].append(float(skipped))
    lr = current_lr(optimizer, lr_scheduler)
    if lr is not None:
        metrics[f"{role}/lr"].append(lr)
    return dict(metrics)
