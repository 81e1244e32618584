"""Names of the non-tensor columns that tie a batch's rows to the trajectory they came from.

An agent loop may return several outputs for one prompt row (a trajectory whose agent rewrote its history splits
into segments, each trained as its own row). The agent-loop runner writes these columns and the trainer reads them
(:mod:`verl.trainer.ppo.sessions`), so the names live here, below both.
"""

from __future__ import annotations

__all__ = ["PADDING", "SEGMENT_COUNT", "SEGMENT_INDEX", "SESSION_ID"]

SESSION_ID = "session_id"  # the prompt row (trajectory) an output row came from, within its batch
SEGMENT_INDEX = "segment_index"  # the row's place among its trajectory's outputs (the last one is the final output)
SEGMENT_COUNT = "segment_count"  # how many rows its trajectory gave
PADDING = "is_padding"  # a row added so the batch splits evenly over the ranks: it trains nothing
