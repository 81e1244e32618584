"""A YAML with several mistakes gets all of them in one answer, whatever kind each is (unknown key, wrong type, a
value only the cross-field checks judge); a validation-only run is not warned about training settings."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from verl.trainer.config.loader import load_config
from verl.trainer.config.validation import ConfigError, ConfigWarning, independent_problems


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        # a wrong type and a name only the cross-field checks know (they used to wait for the type to be fixed)
        ("trainer:\n  total_epochs: two\n  logger: consol\n", ["trainer.total_epochs: expected int", "'console'?"]),
        # an unknown key and an unregistered estimator
        (
            "algorithm:\n  adv_estimator: grpoo\n"
            "actor_rollout_ref:\n  rollout:\n    val_kwargs:\n      temprature: 1\n",
            ["val_kwargs.temprature: unknown key", "algorithm.adv_estimator: 'grpoo' is not a registered name"],
        ),
        # two range problems of the cross-field checks
        ("data:\n  max_prompt_length: -1\ntrainer:\n  logger: [console, wandbb]\n", ["max_prompt_length", "'wandb'?"]),
    ],
)
def test_two_mistakes_are_two_problems_in_one_answer(tmp_path: Path, yaml_text: str, expected: list[str]) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_config(config_file=str(path), overrides=[])
    text = str(info.value)
    assert "(2 problems)" in text, text
    for fragment in expected:
        assert fragment in text, (fragment, text)


def test_knock_on_messages_about_a_reported_key_are_left_out() -> None:
    reported = ["data.train_batch_size: expected int, got 'eight'"]
    more = [
        "data.train_batch_size * actor_rollout_ref.rollout.n = ... do not split evenly",
        "trainer.logger: unknown backend 'x'",
    ]
    assert independent_problems(reported, more) == ["trainer.logger: unknown backend 'x'"]


def test_a_validation_only_run_gets_no_training_warnings() -> None:
    one_response = ["actor_rollout_ref.rollout.n=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"]
    with pytest.warns(ConfigWarning, match="rollout.n=1"):
        load_config(one_response)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        load_config([*one_response, "trainer.val_only=true"])
