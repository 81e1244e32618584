"""The algorithm keys of upstream verl v0.9's example scripts load (trimmed to those keys) and keep their values; what
a loss or estimator cannot run without is refused at config time with one line naming the key."""

from __future__ import annotations

import pytest

from verl.trainer.config.loader import load_config
from verl.trainer.config.validation import ConfigError

A = "actor_rollout_ref.actor"
RC = "algorithm.rollout_correction"
LOGP = "actor_rollout_ref.rollout.calculate_log_probs=True"

# algorithm keys of examples/*_trainer/run_*.sh and examples/rollout_correction/*.sh (upstream v0.9), trimmed
UPSTREAM_SCRIPTS = {
    "dppo_trainer": [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=False",
        f"{A}.policy_loss.loss_mode=dppo_tv",
        f"{A}.loss_agg_mode=seq-mean-token-sum-norm",
        f"{A}.clip_ratio_low=0.15",
        f"{A}.clip_ratio_high=0.15",
        f"{A}.clip_ratio_c=10000.0",
    ],
    "gdpo_trainer": [
        "algorithm.adv_estimator=gdpo",
        '+algorithm.gdpo_reward_keys=["accuracy_reward", "format_reward"]',
        f"{A}.kl_loss_type=low_var_kl",
    ],
    "verl-recipe gvpo": [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=False",
        f"{A}.policy_loss.loss_mode=gvpo",
        f"{A}.gvpo_beta=0.1",
        f"{A}.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.n=4",
    ],
    "verl-recipe sppo": [
        "algorithm.adv_estimator=sppo",
        f"{A}.policy_loss.loss_mode=sppo",
        f"{A}.sppo_eta=1.0",
        "algorithm.sppo_eta=1.0",
        "actor_rollout_ref.rollout.n=1",
    ],
    "verl-recipe flowrl": [
        "algorithm.adv_estimator=grpo",
        f"{A}.policy_loss.loss_mode=flowrl",
        f"{A}.use_kl_loss=True",
        f"{A}.kl_loss_coef=0.0",
        f"{A}.clip_ratio_low=0.2",
        f"{A}.clip_ratio_high=0.28",
    ],
    "otb_trainer": ["algorithm.adv_estimator=optimal_token_baseline", f"{A}.calculate_sum_pi_squared=True"],
    "sapo_trainer": [
        f"{A}.policy_loss.loss_mode=sapo",
        f"+{A}.policy_loss.tau_pos=1.0",
        f"+{A}.policy_loss.tau_neg=1.05",
    ],
    "cispo_trainer": [f"{A}.policy_loss.loss_mode=cispo", f"{A}.clip_ratio_low=10", f"{A}.clip_ratio_high=0.2"],
    "gmpo_trainer": [f"{A}.policy_loss.loss_mode=geo_mean", f"{A}.clip_ratio_low=0.4", f"{A}.clip_ratio_high=0.4"],
    "gspo_trainer": [
        f"{A}.policy_loss.loss_mode=gspo",
        f"{A}.loss_agg_mode=seq-mean-token-mean",
        f"{A}.clip_ratio_low=3e-4",
        f"{A}.clip_ratio_high=4e-4",
        f"{A}.clip_ratio_c=10.0",
    ],
    "rollout_correction/run_qwen2_5_7b_fsdp": [
        "algorithm.adv_estimator=rloo",
        f"{RC}.rollout_is=sequence",
        f"{RC}.rollout_is_threshold=2.0",
        f"{RC}.rollout_is_batch_normalize=true",
        f"{RC}.rollout_rs=null",
        f"{RC}.rollout_rs_threshold=null",
        f"{RC}.bypass_mode=true",
        f"{RC}.loss_type=reinforce",
        LOGP,
    ],
    "rollout_correction/run_qwen2_5_7b_fsdp_multi_rs": [
        f"{RC}.rollout_is=token",
        f"{RC}.rollout_rs='token_k1,seq_max_k2'",
        f"{RC}.rollout_rs_threshold='0.6_1.6,2.5'",
        f"{RC}.bypass_mode=true",
        f"{RC}.loss_type=ppo_clip",
        LOGP,
    ],
}


FLOWRL = [f"{A}.policy_loss.loss_mode=flowrl"]
GVPO = [f"{A}.policy_loss.loss_mode=gvpo", "actor_rollout_ref.rollout.n=4", f"{A}.ppo_micro_batch_size_per_gpu=8"]


@pytest.mark.parametrize("script", sorted(UPSTREAM_SCRIPTS))
def test_upstream_script_keys_load(script: str) -> None:
    cfg = load_config(UPSTREAM_SCRIPTS[script])
    assert cfg is not None


def test_values_are_kept_as_written() -> None:
    cfg = load_config(UPSTREAM_SCRIPTS["rollout_correction/run_qwen2_5_7b_fsdp_multi_rs"])
    rc = cfg.algorithm.rollout_correction
    assert (rc.rollout_rs, rc.rollout_rs_threshold, rc.loss_type) == ("token_k1,seq_max_k2", "0.6_1.6,2.5", "ppo_clip")
    cfg = load_config(UPSTREAM_SCRIPTS["gdpo_trainer"])
    assert list(cfg.algorithm.gdpo_reward_keys) == ["accuracy_reward", "format_reward"]
    icepop = load_config([f"{RC}.rollout_is=token", f"{RC}.rollout_is_threshold=0.5_5.0", LOGP])
    assert icepop.algorithm.rollout_correction.rollout_is_threshold == "0.5_5.0"


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    return e.value.problems


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ([f"{A}.policy_loss.loss_mode=dro"], f"{A}.policy_loss.dro_beta=None: loss_mode=dro needs a positive beta"),
        (["algorithm.adv_estimator=optimal_token_baseline"], f"set {A}.calculate_sum_pi_squared=true"),
        (
            [
                "algorithm.adv_estimator=tir_optimal_token_baseline",
                f"{A}.calculate_sum_pi_squared=true",
                f"{RC}.bypass_mode=true",
                LOGP,
            ],
            "which algorithm.rollout_correction.bypass_mode=true skips",
        ),
        (["algorithm.adv_estimator=gdpo"], "algorithm.adv_estimator=gdpo needs +algorithm.gdpo_reward_keys"),
        (
            ["algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[a,b]", "+algorithm.gdpo_reward_weights=[1]"],
            "algorithm.gdpo_reward_weights has 1 entries for 2 gdpo_reward_keys",
        ),
        ([f"{A}.loss_scale_factor=0"], f"{A}.loss_scale_factor=0 must be > 0"),
        (["critic.loss_scale_factor=-2"], "critic.loss_scale_factor=-2 must be > 0"),
        ([f"{A}.policy_loss.loss_mode=sapo", f"{A}.tau_neg=0"], "tau_pos/tau_neg must be > 0"),
        ([f"{A}.loss_agg_mode=token-summ"], "token-summ"),
        (
            [f"{A}.policy_loss.loss_mode=gvpo", "actor_rollout_ref.rollout.n=1"],
            "loss_mode=gvpo compares each prompt's responses: set",
        ),
        ([*GVPO, f"{A}.ppo_micro_batch_size_per_gpu=6"], "=6 is not a multiple of actor_rollout_ref.rollout.n=4"),
        ([*GVPO, f"{A}.use_dynamic_bsz=true"], f"{A}.use_dynamic_bsz=true packs micro-batches by tokens"),
        ([*GVPO, f"{A}.shuffle=true"], f"{A}.shuffle=true mixes the rows of prompt groups"),
        ([*GVPO, f"{RC}.rollout_is=token", LOGP], "loss_mode=gvpo has no probability ratio to correct"),
        ([f"{A}.policy_loss.loss_mode=sppo", f"{RC}.bypass_mode=true", LOGP], "loss_mode=sppo has no probability"),
        ([*GVPO, f"{A}.gvpo_beta=0"], f"{A}.gvpo_beta=0.0 must be > 0"),
        ([f"{A}.policy_loss.loss_mode=online_dpo", f"{A}.dpo_beta=-1"], f"{A}.dpo_beta=-1.0 must be > 0"),
        ([f"{A}.policy_loss.loss_mode=online_dpo", f"{A}.dpo_label_smoothing=0.5"], "must be in [0, 0.5)"),
        ([*FLOWRL, f"{RC}.rollout_is=token", LOGP], "loss_mode=flowrl weighs each response by its own capped"),
        ([*FLOWRL, "actor_rollout_ref.model.lora_rank=8"], "loss_mode=flowrl trains a log Z head beside the policy"),
        ([*FLOWRL, f"{A}.ulysses_sequence_parallel_size=2", "trainer.n_gpus_per_node=2"], "is not split over"),
        ([*FLOWRL, f"{A}.policy_loss.flowrl_beta=0"], f"{A}.policy_loss.flowrl_beta=0.0 must be > 0"),
        ([*FLOWRL, f"{A}.policy_loss.flowrl_proj_layers=0"], "flowrl_proj_layers=0 must be >= 1"),
        (["trainer.ref_update_freq=2"], "refreshes the reference policy, which this run does not use"),
        (
            [f"{A}.use_kl_loss=true", "trainer.ref_update_freq=2", "actor_rollout_ref.model.lora_rank=8"],
            "trainer.ref_update_freq=2 with LoRA",
        ),
    ],
)
def test_what_a_loss_or_estimator_needs_is_named(overrides: list[str], fragment: str) -> None:
    problems = _problems(overrides)
    assert any(fragment in p for p in problems), problems


def test_online_dpo_uses_the_reference_and_takes_the_recipes_algorithm_spelling() -> None:
    from verl.trainer.config import need_reference_policy

    cfg = load_config([f"{A}.policy_loss.loss_mode=online_dpo", "+algorithm.dpo_beta=0.3", "trainer.ref_update_freq=1"])
    assert need_reference_policy(cfg) and cfg.actor_rollout_ref.actor.dpo_beta == 0.3
    assert not need_reference_policy(load_config([]))
    assert need_reference_policy(load_config(FLOWRL))  # FlowRL's residual compares with the reference


def test_pf_ppo_keys() -> None:
    cfg = load_config(
        ["algorithm.adv_estimator=gae", "algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=max_min"]
    )
    assert cfg.algorithm.pf_ppo.reweight_method == "max_min"
    (msg,) = _problems(["algorithm.adv_estimator=grpo", "algorithm.use_pf_ppo=true"])
    assert msg.startswith("algorithm.use_pf_ppo=true resamples after GAE only")
