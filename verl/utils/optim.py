"""Optimizer and learning-rate schedules built from an ``optim`` config section (``actor.optim``, ``critic.optim``).

Keys (verl's names): ``optimizer`` / ``optimizer_impl`` / ``override_optimizer_config`` (the class and its extra
arguments), ``lr``, ``betas``, ``eps``, ``weight_decay``, ``lr_warmup_steps``, ``lr_warmup_steps_ratio``,
``lr_scheduler_type`` (``constant`` | ``cosine``; ``warmup_style`` is its deprecated name and wins when set, as in
verl), ``min_lr_ratio``, ``num_cycles``, ``total_training_steps``, ``zero_indexed_step``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from verl.base_config import omega_conf_to_dataclass
from verl.sections.optimizer import OptimConfig


def _typed(optim_config: OptimConfig | Mapping[str, Any]) -> OptimConfig:
    """The section as :class:`OptimConfig` (a partial dict or ``DictConfig`` is completed from its defaults;
    keys it does not have, such as upstream's ``optimizer``, stay readable as extras)."""
    return omega_conf_to_dataclass(optim_config, OptimConfig)


def build_optimizer(
    params: Iterable[torch.nn.Parameter] | Iterable[dict], optim_config: OptimConfig | Mapping[str, Any]
) -> Optimizer:
    """The optimizer ``<optimizer_impl>.<optimizer>`` over ``params`` (upstream v0.9's keys; default torch's AdamW,
    Loshchilov & Hutter, 2019).

    Keyword arguments: ``lr`` and ``weight_decay``; ``betas`` and ``eps`` for an Adam-family name (``adam`` or
    ``ademamix`` in it, as upstream decides); then ``override_optimizer_config`` on top (e.g.
    ``{"bf16_stochastic_round": true}`` for ``torchao.optim._AdamW``). Torch's AdamW uses its fused kernel where the
    tensors allow it.

    Raises:
        ValueError: bad ``lr`` / ``betas``, a module that cannot be imported or a name it does not have.
    """
    cfg = _typed(optim_config)
    betas = tuple(float(b) for b in cfg.betas)
    if len(betas) != 2:
        raise ValueError(f"optim.betas must have two values, got {list(cfg.betas)}")
    if cfg.lr < 0:
        raise ValueError(f"optim.lr must be >= 0, got {cfg.lr}")
    params = list(params)
    name, module_name = str(cfg.optimizer), str(cfg.optimizer_impl)
    kwargs: dict[str, Any] = {"lr": cfg.lr, "weight_decay": cfg.weight_decay}
    if "adam" in name.lower() or "ademamix" in name.lower():
        kwargs.update(betas=betas, eps=cfg.eps)
    kwargs.update(dict(cfg.override_optimizer_config or {}))
    if module_name == "torch.optim" and name.lower() in ("adamw", "adamw_torch"):
        kwargs.setdefault("fused", _can_fuse(params) or None)
        return torch.optim.AdamW(params, **kwargs)
    return optimizer_class(name, module_name)(params, **kwargs)


def optimizer_class(name: str, module_name: str) -> type[Optimizer]:
    """``getattr(import_module(module_name), name)``, with one-line errors naming the keys."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"optim.optimizer_impl={module_name}: cannot import it ({e}); install the package that provides it, or "
            "use torch.optim"
        ) from e
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        available = sorted(n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, Optimizer))
        raise ValueError(
            f"optim.optimizer={name}: {module_name} has no optimizer of that name (it has: {', '.join(available)})"
        )
    return cls


def _can_fuse(params: list) -> bool:
    """Whether torch's fused AdamW kernel applies: plain floating-point tensors on CPU or CUDA (sharded DTensors
    take the default path). On CPU it is ~3x faster than the per-tensor loop (0.16 s vs 0.56 s for 132M fp32
    parameters on one thread here), the optimizer step being memory-bound."""
    from torch.distributed.tensor import DTensor

    tensors = [t for group in params for t in (group["params"] if isinstance(group, dict) else [group])]
    return bool(tensors) and all(
        isinstance(t, torch.Tensor)
        and not isinstance(t, DTensor)
        and t.device.type in ("cpu", "cuda")
        and t.is_floating_point()
        for t in tensors
    )


def get_constant_schedule_with_warmup(
    optimizer: Optimizer, num_warmup_steps: int, last_epoch: int = -1, step_offset: int = 0
) -> LambdaLR:
    """Linear warmup then constant: ``lr(step) = base_lr * min(1, step / num_warmup_steps)``.

    ``step`` counts scheduler steps (0 before the first ``scheduler.step()``) plus ``step_offset`` (1: the first
    update is step 1, upstream's ``zero_indexed_step=false``); with no warmup the factor is 1.
    """

    def lr_lambda(step: int) -> float:
        step += step_offset
        if num_warmup_steps > 0 and step < num_warmup_steps:
            return float(step) / float(num_warmup_steps)
        return 1.0

    return LambdaLR(optimizer, lr_lambda, last_epoch=last_epoch)


def get_cosine_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    min_lr_ratio: float = 0.0,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
    step_offset: int = 0,
) -> LambdaLR:
    """Linear warmup, then cosine decay from ``base_lr`` to ``min_lr_ratio * base_lr`` (Loshchilov & Hutter, SGDR).

    Factor at scheduler step ``t`` (``w`` warmup steps, ``T`` training steps, ``r`` = min_lr_ratio):
    ``t / w`` for ``t < w``; otherwise with ``p = min(1, (t - w) / max(1, T - w))``:
    ``r + (1 - r) * 0.5 * (1 + cos(2 * pi * num_cycles * p))``. ``num_cycles=0.5`` is one half-cosine ending at
    ``r``; ``p`` is clamped so training past ``T`` stays at the end value. ``t`` is the scheduler's step plus
    ``step_offset`` (see :func:`get_constant_schedule_with_warmup`).
    """
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")

    def lr_lambda(step: int) -> float:
        step += step_offset
        if num_warmup_steps > 0 and step < num_warmup_steps:
            return float(step) / float(num_warmup_steps)
        progress = min(1.0, float(step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps)))
        cosine = 0.5 * (1.0 + math.cos(2.0 * math.pi * float(num_cycles) * progress))
        return min_lr_ratio + (1.0 - min_lr_ratio) * cosine

    return LambdaLR(optimizer, lr_lambda, last_epoch=last_epoch)


def resolve_warmup_steps(optim_config: OptimConfig | Mapping[str, Any], total_training_steps: int) -> int:
    """``lr_warmup_steps`` when > 0, else ``int(lr_warmup_steps_ratio * total_training_steps)`` (0 if no ratio)."""
    cfg = _typed(optim_config)
    steps = int(cfg.lr_warmup_steps or 0)  # upstream's SFT section writes -1 (and null) for "no fixed count"
    if steps > 0:
        return steps
    ratio = float(cfg.lr_warmup_steps_ratio or 0.0)
    if ratio < 0:
        raise ValueError(f"optim.lr_warmup_steps_ratio must be >= 0, got {ratio}")
    if ratio > 0:
        if total_training_steps <= 0:
            raise ValueError(
                f"optim.lr_warmup_steps_ratio={ratio} needs total_training_steps > 0, got {total_training_steps}"
            )
        return int(ratio * total_training_steps)
    return 0


def build_lr_scheduler(
    optimizer: Optimizer, optim_config: OptimConfig | Mapping[str, Any], total_training_steps: int | None = None
) -> LambdaLR:
    """The scheduler named by ``lr_scheduler_type`` (or the deprecated ``warmup_style`` when that is set):
    ``constant`` or ``cosine``.

    ``total_training_steps`` defaults to ``optim_config.total_training_steps``; warmup comes from
    :func:`resolve_warmup_steps`. The cosine schedule needs a positive total.
    """
    cfg = _typed(optim_config)
    total = total_training_steps
    if total is None or total <= 0:
        total = cfg.total_training_steps
    warmup = resolve_warmup_steps(cfg, total)
    # verl: warmup_style, when given, overrides lr_scheduler_type (it is the older name of the same setting)
    style = str(cfg.warmup_style or cfg.lr_scheduler_type)
    offset = 0 if cfg.zero_indexed_step else 1
    if style == "constant":
        return get_constant_schedule_with_warmup(optimizer, num_warmup_steps=warmup, step_offset=offset)
    if style == "cosine":
        if total <= 0:
            raise ValueError(f"optim.lr_scheduler_type=cosine needs total_training_steps > 0, got {total}")
        return get_cosine_schedule_with_warmup(
            optimizer,
            num_warmup_steps=warmup,
            num_training_steps=total,
            min_lr_ratio=0.0 if cfg.min_lr_ratio is None else cfg.min_lr_ratio,  # None: no floor (upstream's FSDP)
            num_cycles=float(cfg.num_cycles),
            step_offset=offset,
        )
    raise ValueError(f"optim.lr_scheduler_type={style!r} is not supported; expected 'constant' or 'cosine'")
