"""Distillation losses and rewards against direct computations on hand-set distributions, token by token."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.distillation import (
    generalized_jsd_loss,
    generalized_jsd_per_token,
    reverse_kl_pg_loss,
    reverse_kl_token_rewards,
)


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0)


def _probs(logits: torch.Tensor, temperature: float = 1.0) -> list[float]:
    return torch.softmax(logits / temperature, -1).tolist()


@pytest.fixture
def logits():
    torch.manual_seed(0)
    return torch.randn(2, 3, 5) * 2, torch.randn(2, 3, 5) * 2


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_generalized_jsd_matches_its_definition(logits, beta, temperature):
    student, teacher = logits
    got = generalized_jsd_per_token(student, teacher, beta=beta, temperature=temperature)
    for b in range(2):
        for t in range(3):
            ps, pt = _probs(student[b, t], temperature), _probs(teacher[b, t], temperature)
            if beta == 0.0:
                want = _kl(pt, ps)  # forward KL, TRL's beta=0
            elif beta == 1.0:
                want = _kl(ps, pt)  # reverse KL, TRL's beta=1
            else:
                m = [beta * a + (1 - beta) * c for a, c in zip(pt, ps)]
                want = beta * _kl(pt, m) + (1 - beta) * _kl(ps, m)
            assert got[b, t].item() == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_jsd_is_zero_for_equal_distributions_and_reduces_over_the_mask(logits):
    student, teacher = logits
    assert generalized_jsd_per_token(student, student.clone(), 0.5).abs().max().item() < 1e-6
    mask = torch.tensor([[1, 1, 0], [0, 1, 0]])
    per_token = generalized_jsd_per_token(student, teacher, 0.5)
    total = per_token[0, 0] + per_token[0, 1] + per_token[1, 1]
    assert generalized_jsd_loss(student, teacher, mask, 0.5, reduction="sum").item() == pytest.approx(total.item())
    assert generalized_jsd_loss(student, teacher, mask, 0.5).item() == pytest.approx(total.item() / 3)
    with pytest.raises(ValueError, match="beta"):
        generalized_jsd_per_token(student, teacher, beta=1.5)
    with pytest.raises(ValueError, match="vocabulary"):
        generalized_jsd_per_token(student, teacher[..., :4])


def test_jsd_gradient_flows_into_the_student_only(logits):
    student, teacher = (x.clone().requires_grad_(True) for x in logits)
    generalized_jsd_loss(student, teacher, torch.ones(2, 3), beta=0.5).backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert teacher.grad is None


def test_reverse_kl_rewards_token_by_token():
    s = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -3.0, -0.2]])
    t = torch.tensor([[-1.5, -1.0, -0.5], [-0.3, -0.2, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    r = reverse_kl_token_rewards(s, t, mask, coef=0.5)
    want = [-0.5 * 1.0, 0.0, -0.5 * -1.5, -0.5 * 0.2, -0.5 * -2.8, 0.0]
    assert r.flatten().tolist() == pytest.approx(want)
    assert not r.requires_grad


def test_reverse_kl_pg_loss_is_an_unbiased_gradient_of_the_reverse_kl():
    """Enumerate every token: E_{y ~ p_s}[grad loss(y)] equals grad KL(p_s || p_t) at one position."""
    torch.manual_seed(1)
    s_logits = torch.randn(6, requires_grad=True)
    t_logits = torch.randn(6)
    log_ps, log_pt = torch.log_softmax(s_logits, -1), torch.log_softmax(t_logits, -1)
    expected_grad = torch.zeros(6)
    for y in range(6):
        (g,) = torch.autograd.grad(
            reverse_kl_pg_loss(log_ps[y].view(1, 1), log_pt[y].view(1, 1), torch.ones(1, 1), coef=1.0),
            s_logits,
            retain_graph=True,
        )
        expected_grad += log_ps[y].exp().detach() * g
    kl = (log_ps.exp() * (log_ps - log_pt)).sum()
    (true_grad,) = torch.autograd.grad(kl, s_logits)
    assert expected_grad.tolist() == pytest.approx(true_grad.tolist(), abs=1e-5)
