"""The per-row columns a rollout adds when it judged its trajectories itself (``reward_model.judge.overlap_rollout``,
:mod:`verl.experimental.agent_loop.judge_overlap`), read back by the ``judge`` reward manager."""

from __future__ import annotations

import hashlib

__all__ = ["ANSWER_KEY", "DIGEST_KEY", "ERROR_KEY", "JUDGE_COLUMNS", "LATENCY_KEY", "judge_text_digest"]

ANSWER_KEY = "judge_overlap_answer"
ERROR_KEY = "judge_overlap_error"
LATENCY_KEY = "judge_overlap_latency_s"
DIGEST_KEY = "judge_overlap_sha1"
JUDGE_COLUMNS = (ANSWER_KEY, ERROR_KEY, LATENCY_KEY, DIGEST_KEY)
"""Per-row non-tensor columns: the judge's raw answer (None when the request failed), the error (None when it
answered), the request's seconds (retries included) and the SHA-1 of the judge prompt that was sent."""


def judge_text_digest(text: str) -> str:
    """SHA-1 hex digest of a judge prompt (the reward manager checks its own prompt against it)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()
