"""A PPO-family run that cannot learn says so and fails with a named error instead of exiting 0.

Two cases:

* **Degenerate reward** (:class:`RewardHealth`): a step whose sequence scores are all equal *because* the reward
  failed: at least half of the batch carries a failure flag of the reward (``reward_error``: an exception or a
  time-out under ``on_error=zero``; ``judge_parse_failure`` / ``judge_request_failure``: an LLM judge whose answer
  could not be parsed or whose request failed; any other 0/1 column whose name ends in ``_error``, ``_failure`` or
  ``_timeout``). With every score equal, every GRPO advantage is 0 and the step trains nothing. Each such step is
  said on the console at once; after ``trainer.max_degenerate_reward_steps`` of them in a row the run fails with
  :class:`DegenerateRewardError` (0: never fails, still said). Scores that are all equal with no failure behind them
  (a task too hard for the model yet) are not this case.
* **No step trained** (:func:`check_trained_steps`): the loop ended without training a step (the data ran out
  before the first batch), not validation-only, not stopped by a signal, not already finished:
  :class:`NoTrainingStepsError`.

Both are :class:`RunHealthError`: the entry points print the one line and exit with code 1, no traceback; the
run's ``run_info.json`` records the failure.

And one warning (:class:`ToolUseHealth`): an agent run with tools whose trajectories made no tool call for
``trainer.warn_no_tool_call_steps`` steps in a row is said on the console (with the parse failures, which usually
explain it: a ``multi_turn.format`` that does not match what the model writes). Such a run can train for hours on
answers that never use a tool (verl #3257); it is a warning, not an error, because a policy may rightly stop
calling a tool it does not need.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import numpy as np

from verl.utils.errors import RunHealthError

__all__ = [
    "FAILURE_FLAG_KEYS",
    "DegenerateRewardError",
    "NoTrainingStepsError",
    "RewardHealth",
    "ToolUseHealth",
    "RunHealthError",
    "check_trained_steps",
    "failure_fractions",
]

# per-sample 0/1 columns that mean "this sample's reward is not a real score"
FAILURE_FLAG_KEYS = ("reward_error", "judge_parse_failure", "judge_request_failure")
_FAILURE_SUFFIX = re.compile(r"(_error|_failure|_timeout)$")
# share of the batch that must be flagged for equal scores to count as caused by failures
MIN_FAILED_FRACTION = 0.5


class DegenerateRewardError(RunHealthError):
    """``trainer.max_degenerate_reward_steps`` consecutive steps had the same score for every sample because the
    reward failed (parse failures, time-outs, errors)."""


class NoTrainingStepsError(RunHealthError):
    """The training loop ended without training a step."""


def _flag_column(values: Any) -> np.ndarray | None:
    """A 0/1 column as booleans; None when a value is not a number 0/1 (then it is no failure flag)."""
    out = []
    for v in values:
        if v is None:
            out.append(False)
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            return None
        if f != f:  # NaN: the sample did not report it
            out.append(False)
        elif f in (0.0, 1.0):
            out.append(f == 1.0)
        else:
            return None
    return np.asarray(out, dtype=bool)


def failure_fractions(non_tensor_batch: dict[str, Any], n: int) -> tuple[dict[str, float], float]:
    """``({flag key: fraction of the n samples flagged}, fraction flagged by any key)`` of a scored batch's
    per-sample columns (:data:`FAILURE_FLAG_KEYS` and 0/1 columns named ``*_error|*_failure|*_timeout``)."""
    fractions: dict[str, float] = {}
    any_flag = np.zeros(n, dtype=bool)
    for key, values in non_tensor_batch.items():
        if key not in FAILURE_FLAG_KEYS and not _FAILURE_SUFFIX.search(str(key)):
            continue
        if len(values) != n:
            continue
        flags = _flag_column(values)
        if flags is None or not flags.any():
            continue
        fractions[str(key)] = float(flags.mean())
        any_flag |= flags
    return fractions, float(any_flag.mean()) if n else 0.0


class RewardHealth:
    """Watches each training step's scores (see the module docstring). ``max_steps``:
    ``trainer.max_degenerate_reward_steps``."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = int(max_steps)
        self.consecutive = 0

    def observe(self, step: int, scores: Any, non_tensor_batch: dict[str, Any]) -> str | None:
        """Check step ``step``'s sequence scores ``[batch]`` (``token_level_scores.sum(-1)``) and per-sample columns.

        Returns the console line of a degenerate step (None otherwise); raises :class:`DegenerateRewardError` when
        this is the ``max_steps``-th degenerate step in a row.
        """
        values = np.asarray(scores.detach().cpu().float() if hasattr(scores, "detach") else scores, dtype=np.float64)
        n = int(values.size)
        if n == 0:
            return None
        fractions, failed = failure_fractions(non_tensor_batch, n)
        degenerate = bool(np.nanmax(values) - np.nanmin(values) <= 1e-12) and failed >= MIN_FAILED_FRACTION
        if not degenerate:
            self.consecutive = 0
            return None
        self.consecutive += 1
        causes = ", ".join(f"{k} {v:.0%}" for k, v in sorted(fractions.items(), key=lambda kv: -kv[1]))
        limit = f"{self.consecutive} of trainer.max_degenerate_reward_steps={self.max_steps} in a row"
        if self.max_steps <= 0:
            limit = f"{self.consecutive} in a row (trainer.max_degenerate_reward_steps=0: never stops)"
        message = (
            f"step {step}: degenerate reward: all {n} scores are {float(values[0]):g} because the reward failed "
            f"({causes}); every advantage is 0, this step trains nothing ({limit}). See the reward's warnings above "
            "and the samples in the run's samples.jsonl"
        )
        if self.max_steps > 0 and self.consecutive >= self.max_steps:
            raise DegenerateRewardError(message)
        return message

    def observe_batch(self, step: int, batch: Any) -> None:
        """:meth:`observe` on a scored ``DataProto`` (``token_level_scores``), the line written to stderr."""
        from verl.utils.logging_utils import console_write

        if batch is None or "token_level_scores" not in batch.batch.keys():
            return
        line = self.observe(step, batch.batch["token_level_scores"].sum(-1), dict(batch.non_tensor_batch))
        if line is not None:
            console_write(f"[verl] warning: {line}", sys.stderr)


def check_trained_steps(trainer: Any) -> None:
    """Raise :class:`NoTrainingStepsError` (one line: why) when ``trainer.fit()`` trained no step, unless it was
    validation-only or stopped by a signal. ``trainer``: a fitted :class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer`.
    """
    cfg = trainer.config.trainer
    if cfg.val_only or trainer.stopped_by:
        return
    start = int((trainer.resumed_state or {}).get("global_steps", 0))
    if trainer.global_steps > start:
        return
    total = int(trainer.total_training_steps)
    rows = len(trainer.train_dataset) if trainer.train_dataset is not None else 0
    where = f" (resumed from {trainer.resumed_from} at step {start})" if trainer.resumed_from else ""
    if start >= total:
        why = f"the resumed checkpoint is already step {start} of trainer.total_training_steps={total}"
    else:
        from verl.trainer.ppo.driver_data import loader_batch_size

        bs, bs_key = loader_batch_size(trainer.config.data)
        epochs = int(cfg.total_epochs)
        per_epoch = len(trainer.train_dataloader) if trainer.train_dataloader is not None else rows // max(bs, 1)
        per_step = trainer.ledger_batches_per_step() or 1
        consumed = int(trainer.data.ledger.batches)
        # the arithmetic: how many batches the data holds, how many a step takes, how many the run already had
        why = (
            f"the training data ran out before step {start + 1}: {rows} rows // {bs_key}={bs} = "
            f"{per_epoch} batches an epoch x trainer.total_epochs={epochs} = {per_epoch * epochs} batches, "
            f"{per_step} a step = {per_epoch * epochs // per_step} steps in all; "
            f"{consumed} batches were consumed by step {start}, {max(per_epoch * epochs - consumed, 0)} are left "
            f"(epoch {trainer.data.epoch} of {epochs} reached)"
        )
    raise NoTrainingStepsError(
        f"trained 0 steps{where}: {why}; raise trainer.total_epochs or trainer.total_training_steps, or start "
        f"afresh (trainer.resume_mode=disable trainer.overwrite_checkpoints=true) in {trainer.checkpoint_dir}"
    )


class ToolUseHealth:
    """Counts consecutive steps of an agent run with tools in which no trajectory called a tool (the step's
    ``agent/tool_calls/mean`` metric is 0) and warns at every ``max_steps``-th such step (0: never).

    ``has_tools``: the run's agent loops are given tools (``multi_turn.enable`` with ``tool_config_path`` or
    ``function_tool_path``).
    """

    def __init__(self, max_steps: int, has_tools: bool) -> None:
        self.max_steps = int(max_steps)
        self.has_tools = bool(has_tools)
        self.consecutive = 0

    @classmethod
    def from_config(cls, config: Any) -> ToolUseHealth:
        """From a PPO config: ``trainer.warn_no_tool_call_steps`` and the multi-turn tool keys."""
        mt = config.actor_rollout_ref.rollout.multi_turn
        has_tools = bool(mt.enable) and bool(mt.tool_config_path or mt.function_tool_path)
        return cls(int(config.trainer.warn_no_tool_call_steps), has_tools)

    def observe(self, step: int, metrics: dict[str, Any]) -> str | None:
        """The warning line for step ``step`` of the step's ``metrics``, or None."""
        calls = metrics.get("agent/tool_calls/mean")
        if not self.has_tools or self.max_steps <= 0 or calls is None:
            return None
        if float(calls) > 0:
            self.consecutive = 0
            return None
        self.consecutive += 1
        if self.consecutive % self.max_steps != 0:
            return None
        parse = float(metrics.get("agent/parse_errors/mean", 0.0))
        why = (
            f"{parse:.2f} unparsable tool calls per trajectory: check actor_rollout_ref.rollout.multi_turn.format "
            "against what the model writes (samples.jsonl)"
            if parse > 0
            else "the model answers without calling a tool: a cold start (SFT on tool calls) or a prompt that names "
            "the tools usually fixes this (docs/agent_loop.md)"
        )
        return (
            f"step {step}: no tool call in {self.consecutive} steps in a row although the agent loops have tools; "
            f"{why} (trainer.warn_no_tool_call_steps={self.max_steps})"
        )

    def observe_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        """:meth:`observe`, the line written to stderr."""
        from verl.utils.logging_utils import console_write

        line = self.observe(step, metrics)
        if line is not None:
            console_write(f"[verl] warning: {line}", sys.stderr)
