"""Step metrics of agent rollouts, from the per-sample ``agent_metrics`` column the agent loops fill.

Logged under ``agent/``: ``num_turns/{mean,max,min}``, ``assistant_turns/mean``, ``user_turns/mean``,
``tool_calls/mean`` (per sample), ``tool_calls/<tool>`` (per sample, each tool), ``tool_error_rate`` (errors per
call, malformed calls counted as calls), ``parse_errors/mean``, ``tool_latency_s/mean`` (time in tools per sample),
``latency_s/{mean,max}`` (whole trajectory), ``truncated_ratio``, ``tool_response_cut_ratio``
(cut tool replies per call), ``sanity_mismatch_ratio``, ``reward/mean`` (the loop's own reward), and for
``openai_agent`` rows ``openai/<name>/mean`` (requests, splits, trained_segments, failed, dropped, ...:
``docs/any_agent.md``), all per trajectory (a trajectory that gave several rows counts once, by its final row), and
``segment_rows`` (the batch's rows beyond one per trajectory).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

__all__ = ["compute_agent_metrics"]


def compute_agent_metrics(non_tensor_batch: dict[str, Any]) -> dict[str, float]:
    """The ``agent/*`` metrics of a rollout batch (empty when it has no ``agent_metrics`` column)."""
    if "agent_metrics" not in non_tensor_batch:
        return {}
    all_rows = len(non_tensor_batch["agent_metrics"])
    keep, real = _trajectory_rows(non_tensor_batch)  # per-trajectory metrics: from each one's final row
    non_tensor_batch = {k: np.asarray(v)[keep] for k, v in non_tensor_batch.items() if len(v) == all_rows}
    rows = [dict(m) for m in non_tensor_batch["agent_metrics"]]
    n = max(len(rows), 1)

    def values(key: str) -> np.ndarray:
        return np.array([float(r.get(key, 0) or 0) for r in rows], dtype=np.float64)

    turns = values("num_turns")
    per_tool: Counter[str] = Counter()
    for r in rows:
        per_tool.update(r.get("tool_calls") or {})
    calls = sum(per_tool.values())
    parse_errors = float(values("parse_errors").sum())
    out = {
        "agent/num_turns/mean": float(turns.mean()) if rows else 0.0,
        "agent/num_turns/max": float(turns.max()) if rows else 0.0,
        "agent/num_turns/min": float(turns.min()) if rows else 0.0,
        "agent/assistant_turns/mean": float(values("assistant_turns").mean()) if rows else 0.0,
        "agent/user_turns/mean": float(values("user_turns").mean()) if rows else 0.0,
        "agent/tool_calls/mean": calls / n,
        "agent/tool_error_rate": float(values("tool_errors").sum() + parse_errors) / max(calls + parse_errors, 1.0),
        "agent/parse_errors/mean": parse_errors / n,
        "agent/tool_latency_s/mean": float(values("tool_s").mean()) if rows else 0.0,
        "agent/latency_s/mean": float(values("latency_s").mean()) if rows else 0.0,
        "agent/latency_s/max": float(values("latency_s").max()) if rows else 0.0,
        "agent/truncated_ratio": float(values("truncated").mean()) if rows else 0.0,
        "agent/tool_response_cut_ratio": float(values("tool_responses_cut").sum()) / max(calls, 1),
        "agent/sanity_mismatch_ratio": float(values("sanity_mismatch").mean()) if rows else 0.0,
    }
    # openai_agent rows (verl.experimental.agent_loop.openai_agent.loop): each numeric openai/* value's mean
    openai_keys = sorted({k for r in rows for k, v in r.items() if k.startswith("openai/") and _numeric(v)})
    for key in openai_keys:
        out[f"agent/{key}/mean"] = float(values(key).mean())
    for tool, count in sorted(per_tool.items()):
        out[f"agent/tool_calls/{tool}"] = count / n
    if "agent_reward" in non_tensor_batch:
        out["agent/reward/mean"] = float(np.mean([float(x) for x in non_tensor_batch["agent_reward"]]))
    # rows beyond one per trajectory: the earlier segments of trajectories whose agent rewrote its history
    out["agent/segment_rows"] = float(real - len(rows))
    return out


def _trajectory_rows(non_tensor_batch: dict[str, Any]) -> tuple[np.ndarray, int]:
    """``([rows] bool, real rows)``: each trajectory's final row (``verl.trainer.ppo.sessions``'s columns; every
    row without them), padding rows left out; and the number of rows that are not padding."""
    n = len(non_tensor_batch["agent_metrics"])
    keep = np.ones(n, dtype=bool)
    if "segment_index" in non_tensor_batch and "segment_count" in non_tensor_batch:
        index = np.asarray(non_tensor_batch["segment_index"], dtype=np.int64)
        keep &= index == np.asarray(non_tensor_batch["segment_count"], dtype=np.int64) - 1
    real = np.ones(n, dtype=bool)
    if "is_padding" in non_tensor_batch:
        real = ~np.asarray(non_tensor_batch["is_padding"], dtype=bool)
    return keep & real, int(real.sum())


def _numeric(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.integer, np.floating))
