"""The config of synchronous partial rollouts (verl/trainer/config/partial_rollout_checks.py) and the ``+`` of keys
upstream's config lacks (verl/trainer/config/upstream_plus.py)."""

from __future__ import annotations

import warnings

import pytest

from verl.trainer.config import ConfigError, ConfigWarning, load_config
from verl.trainer.ppo.batch_rollout import make_agent_loop_manager

ON = ["async_training.partial_rollout=true", "algorithm.rollout_correction.rollout_is=token"]


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config([*ON, *overrides])
    return e.value.problems


def test_synchronous_partial_rollouts_load_and_switch_the_rollout_log_probs_on() -> None:
    with pytest.warns(ConfigWarning, match="calculate_log_probs=true"):
        cfg = load_config([*ON, "actor_rollout_ref.rollout.name=hf"])
    assert cfg.async_training.partial_rollout and cfg.async_training.mode is None
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["algorithm.filter_groups.enable=true"], "filter_groups (DAPO's dynamic sampling)"),
        (["algorithm.adv_estimator=remax"], "remax needs a greedy rollout"),
        (["actor_rollout_ref.rollout.multi_turn.enable=true"], "not agent-loop trajectories"),
        (["skip.rollout.enable=true"], "skip.rollout replays whole dumped steps"),
        (["trainer.n_gpus_per_node=3"], "do not split over trainer.nnodes * trainer.n_gpus_per_node = 3 ranks"),
        (["async_training.mode=one_step_off"], "one_step_off rollouts are whole batches"),
    ],
)
def test_what_cannot_continue_across_steps_is_refused_in_one_line(overrides: list[str], needle: str) -> None:
    problems = _problems(overrides)
    assert any(needle in p for p in problems), problems


def test_warnings_name_the_missing_correction_and_a_small_decode_batch() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_config(["async_training.partial_rollout=true", "actor_rollout_ref.rollout.name=hf"])
        load_config([*ON, "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.max_num_seqs=4"])
    said = " ".join(str(w.message) for w in caught if issubclass(w.category, ConfigWarning))
    assert "rollout_is=token weighs each token by its own sampler" in said
    assert "Raise max_num_seqs to" in said


def test_single_turn_agent_loops_are_generated_plainly() -> None:
    # upstream v0.9's default rollout.mode=async with single_turn_agent: accepted, and no agent loops are built
    cfg = load_config([*ON, "actor_rollout_ref.rollout.mode=async"])
    assert make_agent_loop_manager(cfg, tokenizer=None, group=None) is None


def test_plus_sets_a_key_upstream_lacks_and_still_refuses_one_it_has() -> None:
    cfg = load_config(["+async_training.partial_rollout=true", "algorithm.rollout_correction.rollout_is=token"])
    assert cfg.async_training.partial_rollout is True
    with pytest.raises(ConfigError, match=r"data.seed already exists; drop the \+"):
        load_config(["+data.seed=3"])
