"""Upstream verl v0.9's distillation keys (enabled, teacher_models, distillation_loss, ...) drive our on-policy
distillation; what we cannot honour is refused in one line."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.distillation import estimator_token_rewards, reverse_kl_token_rewards
from verl.protocol import DataProto
from verl.trainer.config import ConfigError, load_config
from verl.trainer.ppo.batch_transforms import apply_distillation_reward

INFERENCE = "distillation.teacher_models.teacher_model.inference"
TEACHER = ["distillation.enabled=true", "distillation.teacher_models.teacher_model.model_path=/teacher"]

LN2 = math.log(2.0)


def test_upstream_keys_resolve_onto_ours() -> None:
    cfg = load_config(
        [
            *TEACHER,
            "distillation.distillation_loss.use_task_rewards=false",
            "distillation.distillation_loss.loss_mode=k3",
            "distillation.teacher_models.teacher_model.inference.dtype=bfloat16",
            "distillation.teacher_models.teacher_model.inference.max_model_len=2048",
            "distillation.nnodes=1",
            "distillation.n_gpus_per_node=1",
        ]
    )
    d = cfg.distillation
    assert (d.enable, d.teacher.path, d.task_reward_weight, d.coef, d.dtype) == (True, "/teacher", 0.0, 1.0, "bfloat16")
    assert list(cfg.trainer.resource_pool_spec.teacher_pool) == [1]
    assert cfg.trainer.resource_pool_mapping.teacher == "teacher_pool"
    cfg = load_config([*TEACHER, "distillation.distillation_loss.distillation_loss_coef=0.3"])
    assert cfg.distillation.coef == 0.3 and cfg.distillation.task_reward_weight == 1.0
    # ours alone keeps working, and the upstream switch shows it
    cfg = load_config(["distillation.enable=true", "distillation.teacher.path=/t"])
    assert cfg.distillation.enabled is True and cfg.distillation.distillation_loss.loss_mode == "k1"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["distillation.enable=false"], "distillation.enabled=True and distillation.enable=False"),
        (["distillation.teacher.path=/other"], "distillation.teacher.path=/other set the same thing"),
        (["distillation.distillation_loss.use_policy_gradient=false"], "use_policy_gradient=false"),
        (["distillation.distillation_loss.loss_mode=forward_kl_topk"], "forward_kl_topk"),
        (["distillation.distillation_loss.clip_ratio_high=0.28"], "actor_rollout_ref.actor.clip_ratio_high"),
        (["distillation.teacher_models.teacher_model.inference.max_model_len=64"], "max_model_len=64"),
        (
            ["+distillation.teacher_models.geo.model_path=/t2", "+distillation.teacher_models.geo.key=geo"],
            "upstream drops the default entry teacher_model",
        ),
        (["+distillation.teacher_models.teacher_model.inference.enforce_eager=false"], "inference.enforce_eager"),
        ([f"{INFERENCE}.name=sglang"], "sglang is not an engine here"),
        ([f"{INFERENCE}.tensor_model_parallel_size=3"], "divide the teacher's 1 ranks"),
        ([f"{INFERENCE}.expert_parallel_size=2"], "divide a teacher replica's 1"),
        ([f"{INFERENCE}.gpu_memory_utilization=1.5"], "in (0, 1]"),
    ],
)
def test_refusals_and_conflicts_are_one_line(extra: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config([*TEACHER, *extra])
    assert len(err.value.problems) == 1 and needle in err.value.problems[0], err.value.problems


def test_teacher_server_keys_are_checked_and_the_memory_share_is_used() -> None:
    """upstream's v0.9 Qwen3.5 script: tp 8 x ep 8 on an 8-rank teacher pool, vllm, 0.4 of the GPU."""
    inference = INFERENCE
    cfg = load_config(
        [
            *TEACHER,
            "distillation.nnodes=1",
            "distillation.n_gpus_per_node=8",
            "trainer.backend=ray",
            f"{inference}.tensor_model_parallel_size=8",
            f"{inference}.expert_parallel_size=8",
            f"{inference}.name=vllm",
            f"{inference}.gpu_memory_utilization=0.4",
        ]
    )
    assert cfg.distillation.gpu_memory_utilization == 0.4
    assert load_config(TEACHER).distillation.gpu_memory_utilization is None, "unset: no cap (not the 0.5 default)"


def test_estimator_rewards_by_hand() -> None:
    # token 0: student p=1/2, teacher p=1/4 -> d = log(p_s / p_t) = ln 2; token 1: the reverse, d = -ln 2;
    # token 2 is off the mask. Upstream's estimators (verl/trainer/distillation/losses.py via kl_penalty):
    # k1 = d; abs = |d|; k2 = d^2 / 2; k3 = exp(-d) + d - 1  -> 0.5 + ln2 - 1 and 2 - ln2 - 1
    student = torch.log(torch.tensor([[0.5, 0.25, 0.9]]))
    teacher = torch.log(torch.tensor([[0.25, 0.5, 0.1]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    expected = {
        "k1": [LN2, -LN2],
        "abs": [LN2, LN2],
        "k2": [LN2**2 / 2, LN2**2 / 2],
        "k3": [0.5 + LN2 - 1.0, 2.0 - LN2 - 1.0],
    }
    for mode, values in expected.items():
        got = estimator_token_rewards(student, teacher, mask, coef=2.0, loss_mode=mode)
        assert got[0, :2].tolist() == pytest.approx([-2.0 * v for v in values], abs=1e-6), mode
        assert got[0, 2].item() == 0.0
    assert torch.equal(
        estimator_token_rewards(student, teacher, mask, 2.0, "k1"),
        reverse_kl_token_rewards(student, teacher, mask, 2.0),
    )
    clamped = estimator_token_rewards(student, teacher, mask, coef=1.0, loss_mode="k1", loss_max_clamp=0.5)
    assert clamped[0, :2].tolist() == pytest.approx([-0.5, 0.5])


def test_the_loss_mode_reaches_the_reward() -> None:
    student = torch.log(torch.tensor([[0.5, 0.25]]))
    teacher = torch.log(torch.tensor([[0.25, 0.5]]))
    data = DataProto.from_dict(
        {
            "old_log_probs": student,
            "teacher_log_prob": teacher,
            "token_level_scores": torch.tensor([[0.0, 1.0]]),
            "response_mask": torch.ones(1, 2),
        }
    )
    out, _ = apply_distillation_reward(data, coef=1.0, task_reward_weight=0.0, loss_mode="k3")
    assert out.batch["token_level_scores"][0].tolist() == pytest.approx([-(LN2 - 0.5), -(1.0 - LN2)], abs=1e-6)
