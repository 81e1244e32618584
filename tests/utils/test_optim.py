"""AdamW construction and the warmup / cosine schedules against hand-computed learning rates."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from verl.utils.optim import (
    build_lr_scheduler,
    build_optimizer,
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
)


def _opt(lr: float = 1.0) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def _lrs(sched, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        out.append(sched.get_last_lr()[0])
        sched.optimizer.step()
        sched.step()
    return out


def test_build_optimizer_reads_config() -> None:
    cfg = OmegaConf.create({"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1})
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(2))], cfg)
    group = opt.param_groups[0]
    assert isinstance(opt, torch.optim.AdamW)
    assert group["lr"] == 3e-4 and group["betas"] == (0.8, 0.95) and group["eps"] == 1e-6
    assert group["weight_decay"] == 0.1


def test_build_optimizer_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="optim.optimizer"):
        build_optimizer([torch.nn.Parameter(torch.zeros(1))], {"optimizer": "Lion"})


def test_build_optimizer_builds_the_named_class_with_upstreams_arguments() -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    sgd = build_optimizer(params, {"optimizer": "SGD", "lr": 0.5, "weight_decay": 0.1,
                                   "override_optimizer_config": {"momentum": 0.9, "nesterov": True}})  # fmt: skip
    group = sgd.param_groups[0]
    assert type(sgd) is torch.optim.SGD and "betas" not in group  # betas and eps only for an Adam-family name
    assert (group["lr"], group["weight_decay"], group["momentum"], group["nesterov"]) == (0.5, 0.1, 0.9, True)
    adam = build_optimizer(
        params, {"optimizer": "Adam", "betas": [0.5, 0.6], "override_optimizer_config": {"amsgrad": True}}
    )
    assert type(adam) is torch.optim.Adam and adam.param_groups[0]["betas"] == (0.5, 0.6)
    assert adam.param_groups[0]["amsgrad"] is True


def test_build_optimizer_names_the_key_of_a_missing_module_or_class() -> None:
    params = [torch.nn.Parameter(torch.zeros(1))]
    with pytest.raises(ValueError, match=r"optim\.optimizer_impl=no_such_pkg\.optim: cannot import it"):
        build_optimizer(params, {"optimizer": "AdamW8bit", "optimizer_impl": "no_such_pkg.optim"})
    with pytest.raises(ValueError, match=r"optim\.optimizer=AdamW9: torch\.optim has no optimizer .*AdamW, "):
        build_optimizer(params, {"optimizer": "AdamW9"})


def test_zero_indexed_step_false_starts_the_schedule_at_step_one() -> None:
    cfg = {"lr": 2.0, "lr_warmup_steps": 4, "zero_indexed_step": False}
    sched = build_lr_scheduler(build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg), cfg)
    assert _lrs(sched, 5) == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.0])  # zero-indexed: 0, 0.5, 1.0, 1.5, 2.0
    cosine = {**cfg, "lr_scheduler_type": "cosine", "total_training_steps": 6, "lr_warmup_steps": 0}
    sched = build_lr_scheduler(build_optimizer([torch.nn.Parameter(torch.zeros(1))], cosine), cosine)
    assert _lrs(sched, 1) == pytest.approx([2.0 * 0.5 * (1 + math.cos(math.pi / 6))])


def test_constant_with_warmup() -> None:
    sched = get_constant_schedule_with_warmup(_opt(2.0), num_warmup_steps=4)
    assert _lrs(sched, 6) == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.0])


def test_cosine_with_warmup_and_min_ratio() -> None:
    sched = get_cosine_schedule_with_warmup(_opt(1.0), num_warmup_steps=2, num_training_steps=6, min_lr_ratio=0.1)
    # Warmup 0, 0.5; then progress p = (t-2)/4: factor 0.1 + 0.9 * 0.5 * (1 + cos(pi p)).
    expected = [0.0, 0.5, 1.0, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)), 0.55]
    expected += [0.1 + 0.9 * 0.5 * (1 + math.cos(3 * math.pi / 4)), 0.1, 0.1]
    assert _lrs(sched, 8) == pytest.approx(expected)


def test_build_lr_scheduler_warmup_ratio_and_style() -> None:
    cfg = {"lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.25, "warmup_style": "constant"}
    sched = build_lr_scheduler(_opt(1.0), cfg, total_training_steps=8)  # warmup int(0.25 * 8) = 2
    assert _lrs(sched, 3) == pytest.approx([0.0, 0.5, 1.0])
    cfg = {"lr_warmup_steps": 1, "lr_warmup_steps_ratio": 0.5, "warmup_style": "cosine", "min_lr_ratio": 0.0}
    sched = build_lr_scheduler(_opt(1.0), cfg, total_training_steps=3)  # explicit steps win over the ratio
    assert _lrs(sched, 4) == pytest.approx([0.0, 1.0, 0.5, 0.0])


def test_lr_scheduler_type_and_its_deprecated_name() -> None:
    cosine = {"lr_warmup_steps": 0, "min_lr_ratio": 0.0}
    # the current name selects the schedule
    sched = build_lr_scheduler(_opt(1.0), {**cosine, "lr_scheduler_type": "cosine"}, total_training_steps=2)
    assert _lrs(sched, 3) == pytest.approx([1.0, 0.5, 0.0])
    # verl: a warmup_style that is set wins over lr_scheduler_type; null leaves lr_scheduler_type in charge
    both = {**cosine, "lr_scheduler_type": "cosine", "warmup_style": "constant"}
    assert _lrs(build_lr_scheduler(_opt(1.0), both, total_training_steps=2), 3) == pytest.approx([1.0, 1.0, 1.0])
    unset = {**cosine, "lr_scheduler_type": "cosine", "warmup_style": None}
    assert _lrs(build_lr_scheduler(_opt(1.0), unset, total_training_steps=2), 3) == pytest.approx([1.0, 0.5, 0.0])


def test_build_lr_scheduler_errors() -> None:
    with pytest.raises(ValueError, match="lr_scheduler_type"):
        build_lr_scheduler(_opt(), {"warmup_style": "linear"}, 10)
    with pytest.raises(ValueError, match="total_training_steps"):
        build_lr_scheduler(_opt(), {"warmup_style": "cosine"}, -1)
