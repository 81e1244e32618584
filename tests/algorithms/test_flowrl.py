"""FlowRL's trajectory-balance loss (verl/algorithms/flowrl.py) against the recipe's formula, term by term."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.core_algos import get_policy_loss_fn
from verl.algorithms.flowrl import compute_policy_loss_flowrl
from verl.algorithms.registry import needs_log_z, needs_reference, per_response


def _inputs(seed: int = 0, bs: int = 4, length: int = 6) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(bs, length)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    adv = torch.randn(bs, 1, generator=gen).expand(bs, length) * mask
    return {
        "log_prob": -torch.rand(bs, length, generator=gen) * 3,
        "old_log_prob": -torch.rand(bs, length, generator=gen) * 3,
        "ref_log_prob": -torch.rand(bs, length, generator=gen) * 3,
        "advantages": adv,
        "response_mask": mask,
        "log_z": torch.randn(bs, generator=gen),
    }


def _recipe(t: dict[str, torch.Tensor], beta: float = 15.0, cap: float = 10.0) -> torch.Tensor:
    """The recipe's ``compute_flowrl``, written out: masked means over each response, capped exp of the summed
    log-ratio, mean of the weighted squared residuals."""
    m = t["response_mask"]

    def mean(x: torch.Tensor) -> torch.Tensor:
        return (x * m).sum(-1) / m.sum(-1)

    delta = t["log_z"] + mean(t["log_prob"]) - beta * mean(t["advantages"]) - mean(t["ref_log_prob"])
    weight = torch.clamp(torch.exp(((t["log_prob"] - t["old_log_prob"]) * m).sum(-1)), max=cap)
    return (weight * delta**2).mean()


def test_registered_with_its_needs() -> None:
    fn = get_policy_loss_fn("flowrl")
    assert fn is compute_policy_loss_flowrl
    assert needs_log_z(fn) and needs_reference(fn) and per_response(fn)
    assert not needs_log_z(get_policy_loss_fn("vanilla"))


@pytest.mark.parametrize("beta,cap", [(15.0, 10.0), (2.0, 1.5)])
def test_matches_the_recipe_formula(beta: float, cap: float) -> None:
    t = _inputs()
    config = {"policy_loss": {"loss_mode": "flowrl", "flowrl_beta": beta, "flowrl_weight_cap": cap}}
    loss, metrics = compute_policy_loss_flowrl(config=config, **t)
    assert loss.item() == pytest.approx(_recipe(t, beta, cap).item(), rel=1e-5)
    assert metrics["actor/log_z"].item() == pytest.approx(t["log_z"].mean().item())
    assert 0 < metrics["actor/importance_weight"].item() <= cap
    assert math.isfinite(metrics["actor/tb_residual_rms"].item())


def test_weight_is_capped_without_overflow_and_has_no_gradient() -> None:
    t = _inputs(seed=1)
    t["log_prob"] = (t["old_log_prob"] + 200.0).requires_grad_(True)  # exp(sum) would overflow float32
    t["log_z"] = t["log_z"].clone().requires_grad_(True)
    loss, metrics = compute_policy_loss_flowrl(**t)
    assert torch.isfinite(loss) and metrics["actor/importance_weight"].item() == pytest.approx(10.0)
    loss.backward()
    # d loss / d log_z_i = 2 w_i delta_i / bs: the weight is a constant factor
    m = t["response_mask"]
    delta = (
        t["log_z"]
        + (t["log_prob"] * m).sum(-1) / m.sum(-1)
        - 15.0 * (t["advantages"] * m).sum(-1) / m.sum(-1)
        - (t["ref_log_prob"] * m).sum(-1) / m.sum(-1)
    ).detach()
    torch.testing.assert_close(t["log_z"].grad, 2 * 10.0 * delta / 4)


def test_on_policy_weight_is_one_and_padding_does_not_count() -> None:
    t = _inputs(seed=2)
    t["old_log_prob"] = t["log_prob"].clone()
    loss, metrics = compute_policy_loss_flowrl(**t)
    assert metrics["actor/importance_weight"].item() == pytest.approx(1.0)
    padded = dict(t)  # values under the mask's zeros change nothing
    padded["log_prob"] = torch.where(t["response_mask"] > 0, t["log_prob"], torch.full_like(t["log_prob"], -50.0))
    padded["old_log_prob"] = padded["log_prob"].clone()
    assert compute_policy_loss_flowrl(**padded)[0].item() == pytest.approx(loss.item(), rel=1e-6)


def test_refuses_token_importance_weights_and_missing_inputs() -> None:
    t = _inputs()
    with pytest.raises(ValueError, match="rollout_is"):
        compute_policy_loss_flowrl(rollout_is_weights=torch.ones(4, 6), **t)
    t.pop("log_z")
    with pytest.raises(ValueError, match="log_z"):
        compute_policy_loss_flowrl(**t)
