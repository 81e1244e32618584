"""algorithm.rollout_correction: the typed keys (upstream verl's names, off by default) and their checks."""

from __future__ import annotations

import pytest

from verl.trainer.config.loader import load_config
from verl.trainer.config.validation import ConfigError
from verl.utils.errors import ConfigWarning

RC = "algorithm.rollout_correction"
LOGP = "actor_rollout_ref.rollout.calculate_log_probs=true"


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    return e.value.problems


def test_off_by_default() -> None:
    rc = load_config().algorithm.rollout_correction
    assert rc.rollout_is is None and rc.rollout_rs is None and rc.rollout_token_veto_threshold is None
    assert rc.rollout_is_threshold == 2.0 and rc.bypass_mode is False


def test_valid_settings_load() -> None:
    cfg = load_config(
        [LOGP, f"{RC}.rollout_is=sequence", f"{RC}.rollout_rs=geometric", f"{RC}.rollout_rs_threshold=1.001"]
    )
    assert cfg.algorithm.rollout_correction.rollout_rs == "geometric"
    load_config([LOGP, f"{RC}.bypass_mode=true"])


def test_correction_needs_the_rollout_log_probs() -> None:
    # unset, the rollout's log-probs are computed (upstream's rollout servers always return them), with a warning
    with pytest.warns(ConfigWarning, match=f"calculate_log_probs=true: {RC}.rollout_is reads"):
        cfg = load_config([f"{RC}.rollout_is=token"])
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
    # turned off by the user: refused
    (msg,) = _problems(["actor_rollout_ref.rollout.calculate_log_probs=false", f"{RC}.rollout_is=token"])
    assert f"{RC}.rollout_is needs the rollout's log-probs" in msg
    assert "actor_rollout_ref.rollout.calculate_log_probs=true" in msg
    (msg,) = _problems(["actor_rollout_ref.rollout.calculate_log_probs=false", f"{RC}.bypass_mode=true"])
    assert f"{RC}.bypass_mode needs" in msg


def test_unknown_level_is_refused() -> None:
    problems = _problems([LOGP, f"{RC}.rollout_is=geometric"])
    assert any(p.startswith(f"{RC}.rollout_is") and "geometric" in p for p in problems)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ([f"{RC}.rollout_is=token", f"{RC}.rollout_is_threshold=0"], f"{RC}.rollout_is_threshold=0"),
        ([f"{RC}.rollout_rs=token", f"{RC}.rollout_rs_threshold=-1"], f"{RC}.rollout_rs_threshold=-1.0 must be > 0"),
        (
            [f"{RC}.rollout_rs=token", f"{RC}.rollout_rs_threshold=1.5", f"{RC}.rollout_rs_threshold_lower=2"],
            f"{RC}.rollout_rs_threshold_lower=2.0 is above the upper rejection threshold 1.5",
        ),
        ([f"{RC}.rollout_token_veto_threshold=2"], f"{RC}.rollout_token_veto_threshold=2.0 must be in (0, 1)"),
        (
            [f"{RC}.bypass_mode=true", f"{RC}.rollout_rs=token"],
            f"{RC}.rollout_rs=token is the decoupled-mode rejection; in bypass mode use upstream's options",
        ),
        ([f"{RC}.loss_type=reinforce"], f"{RC}.loss_type=reinforce acts in bypass mode only"),
        (
            [f"{RC}.rollout_rs=seq_mean_k3", f"{RC}.rollout_rs_threshold=0.5_1.0"],
            "a k2/k3 option takes one upper bound",
        ),
        ([f"{RC}.rollout_rs=seq_mean_k1"], "rollout_rs_threshold is required when rollout_rs is set"),
        ([f"{RC}.rollout_rs=token_k9", f"{RC}.rollout_rs_threshold=2"], "rollout_rs option 'token_k9' is not one of"),
        (
            [f"{RC}.rollout_is=token", f"{RC}.rollout_is_threshold=2.0_1.0"],
            "IcePop bounds 'lower_upper' need 0 < lower",
        ),
        (
            [f"{RC}.bypass_mode=true", f"{RC}.rollout_is=token", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"],
            "actor_rollout_ref.actor.policy_loss.loss_mode=gspo: with algorithm.rollout_correction.bypass_mode=true",
        ),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode"], "is selected by algorithm.rollout_correction"),
    ],
)
def test_bad_values_name_the_key(overrides: list[str], fragment: str) -> None:
    problems = _problems([LOGP, *overrides])
    assert any(fragment in p for p in problems), problems


def test_a_null_is_threshold_is_fine_while_nothing_reads_it() -> None:
    """v0.9's one_step_off_policy/shell/dapo_7b_math_fsdp2_64_64_ris.sh: rejection only, rollout_is(_threshold)=null."""
    rs_only = [LOGP, f"{RC}.rollout_is=null", f"{RC}.rollout_is_threshold=null"]
    rs_only += ["algorithm.rollout_correction.rollout_rs=seq_mean_k1"]
    cfg = load_config([*rs_only, f"{RC}.rollout_rs_threshold=0.999_1.001"])
    assert cfg.algorithm.rollout_correction.rollout_is_threshold is None
    assert any(
        "rollout_is_threshold is null but rollout_rs=token" in p
        for p in _problems(
            ["algorithm.rollout_correction.rollout_is_threshold=null", "algorithm.rollout_correction.rollout_rs=token"]
        )
    )
    assert any(
        "rollout_is_threshold is null but rollout_is reads it" in p
        for p in _problems(
            ["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=null"]
        )
    )
