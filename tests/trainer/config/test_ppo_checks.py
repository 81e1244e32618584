"""Cross-field checks of a PPO config: batch-size arithmetic (numbers worked out by hand), combinations, helpers."""

from __future__ import annotations

import re
import warnings

import pytest

from verl.trainer.config.loader import load_config
from verl.trainer.config.ppo_checks import critic_enabled, need_reference_policy
from verl.trainer.config.validation import ConfigError, ConfigWarning

ACTOR = "actor_rollout_ref.actor"


# the batch sizes the hand-worked numbers below assume (independent of the shipped demo defaults)
BASE = [
    "data.train_batch_size=16",
    "actor_rollout_ref.rollout.n=4",
    f"{ACTOR}.ppo_mini_batch_size=16",
    f"{ACTOR}.ppo_micro_batch_size_per_gpu=16",
    "critic.ppo_micro_batch_size_per_gpu=16",
]


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(BASE + overrides)
    return e.value.problems


def test_defaults_pass_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        load_config()


# ------------------------------------------------------------------------------------------------- world size
def test_step_sequences_must_split_over_the_world() -> None:
    # 16 prompts * 4 responses = 64 sequences; world = 2 nodes * 3 ranks = 6; 64 % 6 = 4
    msgs = _problems(["trainer.nnodes=2", "trainer.n_gpus_per_node=3"])
    assert any(
        m.startswith("data.train_batch_size * actor_rollout_ref.rollout.n = 16 * 4 = 64 sequences per step")
        and "trainer.nnodes * trainer.n_gpus_per_node = 2 * 3 = 6" in m
        and "(64 % 6 = 4)" in m
        for m in msgs
    )


def test_world_that_divides_passes() -> None:
    # 64 sequences over 4 ranks = 16 per rank, micro 16 divides 16
    cfg = load_config(BASE + ["trainer.n_gpus_per_node=4"])
    assert cfg.trainer.n_gpus_per_node == 4


def test_mini_batch_sequences_must_split_over_the_world() -> None:
    # step: 16 * 1 = 16 over 8 ranks is fine; mini-batch: 4 * 1 = 4 sequences cannot split over 8 ranks
    msgs = _problems(["trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.n=2", f"{ACTOR}.ppo_mini_batch_size=2"])
    (msg,) = msgs
    assert msg.startswith(
        f"{ACTOR}.ppo_mini_batch_size * actor_rollout_ref.rollout.n = 2 * 2 = 4 sequences per mini-batch"
    )
    assert "= 8 (4 % 8 = 4)" in msg


# ------------------------------------------------------------------------------------------------ mini-batches
def test_mini_batch_larger_than_train_batch() -> None:
    (msg,) = _problems([f"{ACTOR}.ppo_mini_batch_size=32"])
    assert msg.startswith(f"{ACTOR}.ppo_mini_batch_size=32 is larger than data.train_batch_size=16")


def test_train_batch_must_be_a_multiple_of_mini_batch() -> None:
    # 16 % 6 = 4; micro 4 keeps the per-rank arithmetic valid (6 * 4 / 1 = 24, 24 % 4 = 0)
    (msg,) = _problems([f"{ACTOR}.ppo_mini_batch_size=6", f"{ACTOR}.ppo_micro_batch_size_per_gpu=4"])
    assert msg.startswith(f"data.train_batch_size=16 is not a multiple of {ACTOR}.ppo_mini_batch_size=6")
    assert "(16 % 6 = 4)" in msg


def test_per_rank_mini_batch_must_divide_into_micro_batches() -> None:
    # 16 prompts * 4 / 1 rank = 64 sequences per rank; 64 % 24 = 16
    (msg,) = _problems([f"{ACTOR}.ppo_micro_batch_size_per_gpu=24"])
    assert "= (16 * 4 / 1) = 64 sequences per rank is not a multiple of" in msg
    assert f"{ACTOR}.ppo_micro_batch_size_per_gpu=24 (64 % 24 = 16)" in msg
    assert "1, 2, 4, 8, 16, 32, 64" in msg
    assert f"{ACTOR}.use_dynamic_bsz=true" in msg


def test_per_rank_arithmetic_uses_the_world_size() -> None:
    # 16 * 4 / 2 ranks = 32 per rank: micro 64 is too large, micro 32 is fine
    (msg,) = _problems(["trainer.n_gpus_per_node=2", f"{ACTOR}.ppo_micro_batch_size_per_gpu=64"])
    assert "larger than the 32 sequences one rank gets per mini-batch" in msg
    assert "(actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n / world = 16 * 4 / 2 = 32)" in msg
    load_config(BASE + ["trainer.n_gpus_per_node=2", f"{ACTOR}.ppo_micro_batch_size_per_gpu=32"])


def test_dynamic_bsz_lifts_the_micro_batch_rule() -> None:
    cfg = load_config(BASE + [f"{ACTOR}.ppo_micro_batch_size_per_gpu=24", f"{ACTOR}.use_dynamic_bsz=true"])
    assert cfg.actor_rollout_ref.actor.use_dynamic_bsz is True


def test_dynamic_bsz_token_budget_must_hold_one_sequence() -> None:
    # 64 prompt + 16 response = 80 tokens > 50
    (msg,) = _problems([f"{ACTOR}.use_dynamic_bsz=true", f"{ACTOR}.ppo_max_token_len_per_gpu=50"])
    assert msg.startswith(f"{ACTOR}.ppo_max_token_len_per_gpu=50 is below one full sequence")
    assert "= 64 + 16 = 80" in msg


def test_sizes_must_be_positive() -> None:
    msgs = _problems(["data.train_batch_size=0", "trainer.nnodes=-1"])
    assert "data.train_batch_size: must be >= 1, got 0" in msgs
    assert "trainer.nnodes: must be >= 1, got -1" in msgs


# --------------------------------------------------------------------------------------------------------- critic
def test_critic_arithmetic_only_when_the_critic_is_enabled() -> None:
    bad_micro = "critic.ppo_micro_batch_size_per_gpu=24"
    load_config(BASE + [bad_micro])  # grpo: no critic, nothing to check
    (msg,) = _problems([bad_micro, "algorithm.adv_estimator=gae"])
    assert msg.startswith("(critic.ppo_mini_batch_size * rollout.n / world) = (16 * 4 / 1) = 64 sequences per rank")
    assert "critic.ppo_micro_batch_size_per_gpu=24 (64 % 24 = 16)" in msg


def test_critic_mini_batch_larger_than_train_batch() -> None:
    (msg,) = _problems(["algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=32"])
    assert msg.startswith("critic.ppo_mini_batch_size=32 is larger than data.train_batch_size=16")


def test_critic_rollout_n_must_match() -> None:
    (msg,) = _problems(["algorithm.adv_estimator=gae", "critic.rollout_n=2"])
    assert msg.startswith("critic.rollout_n=2 differs from actor_rollout_ref.rollout.n=4")


def test_gae_needs_the_critic() -> None:
    (msg,) = _problems(["algorithm.adv_estimator=gae", "critic.enable=false"])
    assert msg.startswith("algorithm.adv_estimator=gae needs a critic")


def test_critic_without_gae_warns() -> None:
    with pytest.warns(ConfigWarning, match="critic.enable=true but algorithm.adv_estimator=grpo"):
        load_config(BASE + ["critic.enable=true"])


# ------------------------------------------------------------------------------------------------ other combos
def test_resume_path_needs_a_path() -> None:
    (msg,) = _problems(["trainer.resume_mode=resume_path"])
    assert msg.startswith("trainer.resume_mode=resume_path needs trainer.resume_from_path")
    cfg = load_config(BASE + ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/ckpt/global_step_3"])
    assert cfg.trainer.resume_from_path == "/ckpt/global_step_3"


def test_reward_model_needs_a_path() -> None:
    (msg,) = _problems(["reward_model.enable=true"])
    assert msg.startswith("reward_model.enable=true needs reward_model.model.path")


def test_kl_in_reward_and_loss_is_a_warning_not_an_error() -> None:
    with pytest.warns(ConfigWarning, match="penalised twice"):
        cfg = load_config(BASE + ["algorithm.use_kl_in_reward=true", f"{ACTOR}.use_kl_loss=true"])
    assert cfg.algorithm.use_kl_in_reward is True


def test_grpo_with_one_response_per_prompt_warns() -> None:
    with pytest.warns(ConfigWarning, match="rollout.n=1: every group holds a single response"):
        load_config(BASE + ["actor_rollout_ref.rollout.n=1", f"{ACTOR}.ppo_micro_batch_size_per_gpu=4"])


def test_several_cross_field_problems_are_reported_together() -> None:
    msgs = _problems(
        ["trainer.resume_mode=resume_path", "algorithm.adv_estimator=gae", "critic.enable=false", "trainer.nnodes=3"]
    )
    assert len(msgs) == 4  # resume path, gae without critic, step split (64 % 3), mini-batch split (64 % 3)


# ---------------------------------------------------------------------------------------------------- helpers
@pytest.mark.parametrize(
    ("enable", "estimator", "expected"),
    [("null", "gae", True), ("null", "grpo", False), ("true", "grpo", True), ("false", "grpo", False)],
)
def test_critic_enabled(enable: str, estimator: str, expected: bool) -> None:
    cfg = load_config(schema=None, overrides=[f"critic.enable={enable}", f"algorithm.adv_estimator={estimator}"])
    assert critic_enabled(cfg) is expected


@pytest.mark.parametrize(
    ("in_reward", "in_loss", "expected"),
    [("false", "false", False), ("true", "false", True), ("false", "true", True), ("true", "true", True)],
)
def test_need_reference_policy(in_reward: str, in_loss: str, expected: bool) -> None:
    cfg = load_config(
        schema=None, overrides=[f"algorithm.use_kl_in_reward={in_reward}", f"{ACTOR}.use_kl_loss={in_loss}"]
    )
    assert need_reference_policy(cfg) is expected


def test_unset_micro_batch_default_adapts_and_an_explicit_one_is_checked(tmp_path):
    from verl.trainer.config import ConfigError, load_config

    small = [
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
    ]
    # defaults 32 (actor) and 16 (critic) above the 4 sequences per rank: an unset default fits itself, no error
    cfg = load_config(small)
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4
    assert cfg.critic.ppo_micro_batch_size_per_gpu == 4
    # the largest divisor of the per-rank count not above the default: 48 sequences, default 32 -> 24
    cfg = load_config(
        ["data.train_batch_size=12", "actor_rollout_ref.actor.ppo_mini_batch_size=12", "actor_rollout_ref.rollout.n=4"]
    )
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 24
    assert cfg.critic.ppo_micro_batch_size_per_gpu == 16  # 48 % 16 == 0: a default that fits is kept
    # set by the user, on the command line or in a YAML: checked, never changed
    with pytest.raises(ConfigError, match=r"actor.ppo_micro_batch_size_per_gpu=32 is larger than the 4 sequences"):
        load_config(small + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"])
    user_yaml = tmp_path / "run.yaml"
    user_yaml.write_text("actor_rollout_ref:\n  actor:\n    ppo_micro_batch_size_per_gpu: 3\n")
    with pytest.raises(ConfigError, match=r"not a multiple of actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"):
        load_config(small, config_file=str(user_yaml))


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor_rollout_ref.actor.optim.lr=-1e-5", "actor_rollout_ref.actor.optim.lr=-1e-05 must be >= 0"),
        ("actor_rollout_ref.actor.optim.betas=[0.9,1.0]", r"betas=\[0.9, 1.0\] must be two numbers in \[0, 1\)"),
        ("actor_rollout_ref.actor.optim.eps=0", "eps=0.0 must be > 0"),
        ("actor_rollout_ref.rollout.temperature=0", "temperature=0 with actor_rollout_ref.rollout.do_sample=true"),
        ("actor_rollout_ref.rollout.temperature=-1", "temperature=-1.0 must be >= 0"),
        ("actor_rollout_ref.rollout.top_p=0", r"top_p=0.0 must be in \(0, 1\]"),
        ("actor_rollout_ref.actor.clip_ratio=-0.2", "clip_ratio=-0.2 must be >= 0"),
    ],
)
def test_out_of_range_values_fail_at_config_time(override, message):
    problems = _problems([override])
    assert any(re.search(message, p) for p in problems), problems


def test_in_range_edge_values_pass():
    load_config(BASE + ["actor_rollout_ref.rollout.temperature=0", "actor_rollout_ref.rollout.do_sample=false"])
    load_config(BASE + ["actor_rollout_ref.actor.optim.lr=0"])  # a frozen actor is legitimate


def test_remote_code_is_refused_only_where_the_model_has_code(model_dir_with_code, tiny_model_dir):
    code = [f"actor_rollout_ref.model.path={model_dir_with_code}", "actor_rollout_ref.model.trust_remote_code=true"]
    (problem,) = [p for p in _problems(code) if "trust_remote_code" in p]
    key = "actor_rollout_ref.model.trust_remote_code"
    assert problem.startswith(f"{key}=true runs Python files from the model directory {model_dir_with_code} (")
    assert "config.json: AutoModelForCausalLM -> modeling_custom.CustomForCausalLM" in problem
    assert "trainer.allow_unsafe_operations=true" in problem
    load_config(BASE + code + ["trainer.allow_unsafe_operations=true"])
    # a model transformers builds itself (no auto_map) runs no code of its own: the key changes nothing there
    load_config(
        BASE + [f"actor_rollout_ref.model.path={tiny_model_dir}", "actor_rollout_ref.model.trust_remote_code=true"]
    )
