"""Degenerate reward detection and the zero-steps check (verl/trainer/ppo/run_health.py), on plain arrays."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.trainer.ppo.run_health import (
    DegenerateRewardError,
    NoTrainingStepsError,
    RewardHealth,
    check_trained_steps,
    failure_fractions,
)


def _flags(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=object)


def test_failure_fractions_reads_known_and_suffixed_flags_only() -> None:
    columns = {
        "judge_parse_failure": _flags(1, 1, 0, 0),
        "reward_error": _flags(0, 0, 1, 0),
        "sandbox_timeout": _flags(0, 0, 0, 1),
        "hits": _flags(3, 0, 1, 2),  # a count, not a flag
        "format_error": np.asarray(["x", "", "", ""], dtype=object),  # not numeric: no flag
        "judge_latency_s": _flags(1, 1, 1, 1),  # no failure name
    }
    fractions, failed = failure_fractions(columns, 4)
    assert fractions == {"judge_parse_failure": 0.5, "reward_error": 0.25, "sandbox_timeout": 0.25}
    assert failed == 1.0


def test_equal_scores_from_parse_failures_are_said_and_stop_at_the_threshold() -> None:
    health = RewardHealth(max_steps=3)
    failed = {"judge_parse_failure": _flags(1, 1, 1, 1)}
    line = health.observe(1, torch.zeros(4), failed)
    assert line is not None and "step 1: degenerate reward: all 4 scores are 0" in line
    assert "judge_parse_failure 100%" in line and "1 of trainer.max_degenerate_reward_steps=3" in line
    assert health.observe(2, torch.zeros(4), failed) is not None
    with pytest.raises(DegenerateRewardError, match=r"step 3: .*3 of trainer.max_degenerate_reward_steps=3"):
        health.observe(3, torch.zeros(4), failed)


def test_a_healthy_step_resets_the_count_and_unexplained_equal_scores_are_no_failure() -> None:
    health = RewardHealth(max_steps=2)
    failed = {"reward_error": _flags(1, 1, 1, 0)}
    assert health.observe(1, torch.zeros(4), failed) is not None
    # varied scores: the reward works, the count starts over
    assert health.observe(2, torch.tensor([0.0, 1.0, 0.0, 0.0]), failed) is None
    assert health.consecutive == 0
    # all equal, but nothing failed (a task too hard for now): not this case
    assert health.observe(3, torch.zeros(4), {"reward_error": _flags(0, 0, 0, 0)}) is None
    # all equal with a minority failing: the failures are not why
    assert health.observe(4, torch.zeros(4), {"reward_error": _flags(1, 0, 0, 0)}) is None
    assert health.consecutive == 0


def test_zero_threshold_never_stops_but_still_says_so() -> None:
    health = RewardHealth(max_steps=0)
    for step in range(1, 6):
        line = health.observe(step, torch.ones(2), {"reward_error": _flags(1, 1)})
        assert line is not None and "never stops" in line


def _fitted(
    global_steps: int, resumed: int | None, val_only: bool = False, stopped_by: str | None = None, total: int = 5
):
    return SimpleNamespace(
        config=SimpleNamespace(
            trainer=SimpleNamespace(val_only=val_only, total_epochs=1), data=SimpleNamespace(train_batch_size=2)
        ),
        stopped_by=stopped_by,
        resumed_state={"global_steps": resumed} if resumed is not None else None,
        resumed_from=f"/runs/a/global_step_{resumed}" if resumed is not None else None,
        global_steps=global_steps,
        total_training_steps=total,
        train_dataset=[0, 1, 2, 3],
        train_dataloader=[0, 1],  # two batches an epoch
        data=SimpleNamespace(ledger=SimpleNamespace(batches=2 if resumed else 0), epoch=1),
        ledger_batches_per_step=lambda: 1,
        checkpoint_dir="/runs/a",
    )


def test_zero_trained_steps_is_an_error_naming_why() -> None:
    with pytest.raises(NoTrainingStepsError, match=r"trained 0 steps \(resumed from /runs/a/global_step_2 at step 2\)"):
        check_trained_steps(_fitted(2, 2))
    # the arithmetic of a resumed run whose data is used up: 4 rows // 2 = 2 batches x 1 epoch, both consumed
    with pytest.raises(
        NoTrainingStepsError,
        match=r"at step 2\): the training data ran out before step 3: 4 rows // data.train_batch_size=2 = 2 batches "
        r"an epoch x trainer.total_epochs=1 = 2 batches, 1 a step = 2 steps in all; 2 batches were consumed by step 2, "
        r"0 are left",
    ):
        check_trained_steps(_fitted(2, 2, total=5))
    with pytest.raises(NoTrainingStepsError, match=r"data ran out before step 1: 4 rows // data.train_batch_size=2"):
        check_trained_steps(_fitted(0, None))
    check_trained_steps(_fitted(3, 2))  # trained one step
    check_trained_steps(_fitted(0, None, val_only=True))  # validation only: nothing to train
    check_trained_steps(_fitted(2, 2, stopped_by="SIGINT"))  # stopped by the user


def test_tool_use_health_warns_every_n_steps_without_a_tool_call() -> None:
    from verl.trainer.ppo.run_health import ToolUseHealth

    health = ToolUseHealth(max_steps=3, has_tools=True)
    no_call = {"agent/tool_calls/mean": 0.0, "agent/parse_errors/mean": 0.0}
    assert [health.observe(s, no_call) for s in (1, 2)] == [None, None]
    line = health.observe(3, no_call)
    assert line is not None and "no tool call in 3 steps" in line and "trainer.warn_no_tool_call_steps=3" in line
    assert health.observe(4, {"agent/tool_calls/mean": 0.5}) is None  # a call resets the count
    assert health.observe(5, no_call) is None
    # unparsable calls are named as the likely cause
    parse = {"agent/tool_calls/mean": 0.0, "agent/parse_errors/mean": 1.5}
    health = ToolUseHealth(max_steps=1, has_tools=True)
    assert "multi_turn.format" in health.observe(1, parse)


def test_tool_use_health_is_quiet_without_tools_or_when_off() -> None:
    from verl.trainer.config import load_config
    from verl.trainer.ppo.run_health import ToolUseHealth

    no_call = {"agent/tool_calls/mean": 0.0}
    assert ToolUseHealth(max_steps=1, has_tools=False).observe(1, no_call) is None
    assert ToolUseHealth(max_steps=0, has_tools=True).observe(1, no_call) is None
    assert ToolUseHealth(max_steps=1, has_tools=True).observe(1, {}) is None  # not an agent run
    assert not ToolUseHealth.from_config(load_config([])).has_tools
