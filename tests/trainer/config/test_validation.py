"""validate_config: unknown keys with suggestions, types, choices, conversions, and all problems at once."""

from __future__ import annotations

import sys
import types
import warnings

import pytest
from omegaconf import OmegaConf

from verl.trainer.config.loader import load_config
from verl.trainer.config.schema import PPOConfig
from verl.trainer.config.validation import ConfigError, ConfigWarning, validate_config
from verl.trainer.ppo.runner import ray_init_kwargs


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    return e.value.problems


# --------------------------------------------------------------------------------------------------- unknown keys
def test_unknown_key_names_full_path_and_closest_key() -> None:
    (msg,) = _problems(["actor_rollout_ref.actor.ppo_mini_batch_sze=8"])
    assert msg.startswith("actor_rollout_ref.actor.ppo_mini_batch_sze: unknown key; did you mean ")
    assert "actor_rollout_ref.actor.ppo_mini_batch_size" in msg
    assert "+actor_rollout_ref.actor.ppo_mini_batch_sze=" in msg  # how to add it on purpose


def test_unknown_section_is_suggested_too() -> None:
    (msg,) = _problems(["trainr.nnodes=2"])
    assert msg.startswith("trainr: unknown key; did you mean trainer?")


def test_unknown_key_without_close_match_lists_valid_keys() -> None:
    (msg,) = _problems(["algorithm.zzzzzz=1"])
    assert "algorithm.zzzzzz: unknown key; valid keys here: gamma, lam, adv_estimator" in msg


def test_free_form_sections_accept_any_key() -> None:
    cfg = load_config(
        ["custom_reward_function.reward_kwargs={scale: 2.0}", "actor_rollout_ref.model.override_config.dropout=0.0"]
    )
    assert cfg.custom_reward_function.reward_kwargs.scale == 2.0
    assert cfg.actor_rollout_ref.model.override_config.dropout == 0.0


def test_plus_keys_are_exempt_only_when_added_with_plus() -> None:
    cfg = load_config(["+trainer.my_tag=x"])
    assert cfg.trainer.my_tag == "x"
    # the same key set without + is a typo candidate
    (msg,) = _problems(["trainer.my_tag=x"])
    assert msg.startswith("trainer.my_tag: unknown key")
    # and validating the loaded config again without the exemption flags it
    with pytest.raises(ConfigError, match="trainer.my_tag: unknown key"):
        validate_config(cfg, PPOConfig)
    validate_config(cfg, PPOConfig, extra_keys=["trainer.my_tag"])


def test_a_key_added_with_plus_that_nothing_reads_is_warned_with_the_closest_key() -> None:
    # a misspelt + key would otherwise pass silently: it is kept (a user's own code may read it) and named
    with pytest.warns(ConfigWarning) as caught:
        cfg = load_config(["+actor_rollout_ref.actor.clip_ratio_hihg=0.3", "+my_section.alpha=0.5"])
    messages = [str(w.message) for w in caught if "added with +" in str(w.message)]
    assert len(messages) == 2
    (typo,) = [m for m in messages if m.startswith("actor_rollout_ref.actor.clip_ratio_hihg:")]
    assert "did you mean actor_rollout_ref.actor.clip_ratio_high" in typo
    assert cfg.actor_rollout_ref.actor.clip_ratio_hihg == 0.3
    # keys under a free-form mapping are the mapping's own, and a section whose entries are added with + (ray.init's
    # arguments) reads them all: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        cfg = load_config(
            ["+actor_rollout_ref.model.override_config.attention_dropout=0.0", "+ray_kwargs.ray_init.num_gpus=0"]
        )
    assert ray_init_kwargs(cfg)["num_gpus"] == 0


def test_a_plus_on_a_key_upstream_lacks_is_a_set_of_ours() -> None:
    # upstream v0.9's config has no gdpo keys and its GDPO script adds them with +: here they are fields
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        cfg = load_config(["algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[accuracy,format]"])
    assert list(cfg.algorithm.gdpo_reward_keys) == ["accuracy", "format"]
    with pytest.raises(ConfigError, match="gdpo_reward_weights has 1 entries for 2"):
        load_config(
            ["algorithm.adv_estimator=gdpo", "algorithm.gdpo_reward_keys=[a,b]", "algorithm.gdpo_reward_weights=[1.0]"]
        )


def test_missing_key_is_reported() -> None:
    cfg = load_config()
    del cfg.trainer["seed"]
    with pytest.raises(ConfigError, match=r"trainer.seed: missing key \(expected int\)"):
        validate_config(cfg, PPOConfig)


def test_section_replaced_by_a_value() -> None:
    (msg,) = _problems(["algorithm.kl_ctrl=5"])
    assert msg == "algorithm.kl_ctrl: expected a section (mapping) of KLControlConfig, got 5 (int)"


# ----------------------------------------------------------------------------------------------------------- types
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.train_batch_size=abc", "data.train_batch_size: expected int, got 'abc'"),
        ("data.train_batch_size=1.5", "data.train_batch_size: expected int, got 1.5 (float)"),
        ("data.train_batch_size=true", "data.train_batch_size: expected int, got True (bool)"),
        ("data.train_batch_size=null", "data.train_batch_size: expected int, got null"),
        ("data.shuffle=1", "data.shuffle: expected bool, got 1 (int)"),
        ("actor_rollout_ref.actor.optim.lr=fast", "actor_rollout_ref.actor.optim.lr: expected float, got 'fast'"),
        ("data.val_batch_size=all", "data.val_batch_size: expected int or null, got 'all'"),
        ("trainer.profile_steps=[1,two]", "trainer.profile_steps: expected list[int], got [1, 'two'] (list)"),
        ("actor_rollout_ref.actor.optim.betas=0.9", "actor_rollout_ref.actor.optim.betas: expected list[float]"),
        ("actor_rollout_ref.model.override_config=3", "override_config: expected mapping, got 3 (int)"),
        ("data.train_files=7", None),  # a number for a str field is converted, not rejected
    ],
)
def test_wrong_type_names_key_expected_type_and_value(override: str, message: str | None) -> None:
    if message is None:
        assert load_config([override]).data.train_files == "7"
        return
    (msg,) = _problems([override])
    assert message in msg


def test_harmless_conversions_are_written_back() -> None:
    cfg = load_config(
        [
            "actor_rollout_ref.actor.optim.lr=1",
            "actor_rollout_ref.actor.optim.betas=[0,0]",  # ints in a list[float]: converted
            "trainer.experiment_name=2024",
            "trainer.logger=console",
        ]
    )
    lr = cfg.actor_rollout_ref.actor.optim.lr
    assert lr == 1.0 and isinstance(lr, float)
    assert all(isinstance(b, float) for b in cfg.actor_rollout_ref.actor.optim.betas)
    assert cfg.trainer.experiment_name == "2024"
    assert list(cfg.trainer.logger) == ["console"]


def test_optional_fields_accept_null() -> None:
    cfg = load_config(["actor_rollout_ref.actor.clip_ratio_low=null", "trainer.max_actor_ckpt_to_keep=null"])
    assert cfg.actor_rollout_ref.actor.clip_ratio_low is None


# --------------------------------------------------------------------------------------------------------- choices
@pytest.mark.parametrize(
    ("key", "bad", "choices"),
    [
        ("actor_rollout_ref.rollout.name", "tgi", "auto, hf, vllm"),
        ("trainer.backend", "slurm", "auto, local, ray"),
        ("actor_rollout_ref.actor.optim.warmup_style", "linear", "constant, cosine"),
        ("critic.optim.warmup_style", "linear", "constant, cosine"),
        ("data.truncation", "middle", "error, left, right"),
        ("trainer.resume_mode", "always", "auto, disable, resume_path"),
        (
            "actor_rollout_ref.actor.loss_agg_mode",
            "sum",
            "token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm",
        ),
        ("critic.loss_agg_mode", "sum", "token-mean, token-sum, seq-mean-token-sum"),
        ("reward_model.on_error", "ignore", "fail, zero"),
        ("algorithm.kl_ctrl.type", "pid", "fixed, adaptive"),
    ],
)
def test_bad_choice_lists_the_choices(key: str, bad: str, choices: str) -> None:
    (msg,) = _problems([f"{key}={bad}"])
    assert msg.startswith(f"{key}: expected one of {choices}")
    assert f"got '{bad}'" in msg


def test_bad_choice_suggests_the_closest() -> None:
    (msg,) = _problems(["actor_rollout_ref.rollout.name=vlm"])
    assert msg.endswith("did you mean 'vllm'?")


def test_all_problems_are_listed_one_per_line() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(["data.train_batch_size=abc", "trainer.backend=slurm", "data.shufle=false"])
    assert len(e.value.problems) == 3
    lines = str(e.value).splitlines()
    assert lines[0] == "invalid config (3 problems):"
    assert [line.startswith("  - ") for line in lines[1:]] == [True, True, True]


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


# ------------------------------------------------------------------------------------------ adv_estimator registry
def _fake_core_algos(monkeypatch: pytest.MonkeyPatch, names: list[str]) -> None:
    fake = types.ModuleType("verl.trainer.ppo.core_algos")
    fake.ADV_ESTIMATOR_REGISTRY = {n: (lambda *a, **k: None) for n in names}
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", fake)


def test_adv_estimator_must_be_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_core_algos(monkeypatch, ["gae", "grpo", "rloo"])
    (msg,) = _problems(["algorithm.adv_estimator=grpoo"])
    assert msg == (
        "algorithm.adv_estimator: 'grpoo' is not a registered name; registered in "
        "verl.trainer.ppo.core_algos.ADV_ESTIMATOR_REGISTRY: gae, grpo, rloo; did you mean 'grpo'?"
    )
    assert load_config(["algorithm.adv_estimator=rloo"]).algorithm.adv_estimator == "rloo"


def test_adv_estimator_check_is_skipped_without_core_algos(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import raise ModuleNotFoundError, as if the module were not written yet
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", None)
    cfg = load_config(["algorithm.adv_estimator=my_estimator"])
    assert cfg.algorithm.adv_estimator == "my_estimator"


def test_validate_plain_dictconfig() -> None:
    cfg = OmegaConf.create(OmegaConf.to_container(load_config()))
    assert validate_config(cfg, PPOConfig) == []
