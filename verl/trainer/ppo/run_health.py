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
        why = (
            f"the training data ran out before step {start + 1}: epoch {trainer._epoch} of "
            f"trainer.total_epochs={int(cfg.total_epochs)} reached, {rows} rows, "
            f"data.train_batch_size={int(trainer.config.data.train_batch_size)}"
        )
    raise NoTrainingStepsError(
        f"trained 0 steps{where}: {why}; raise trainer.total_epochs or trainer.total_training_steps, or start "
        f"afresh (trainer.resume_mode=disable trainer.overwrite_checkpoints=true) in {trainer.checkpoint_dir}"
    )
