"""Reducing metric lists to scalars, with verl's rule: a name containing ``max`` takes the maximum, one containing
``min`` the minimum, anything else the mean (weighted by per-list weights when given)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.reporting.metric.aggregation import AggregationType, Metric  # noqa: F401  (upstream imports them from here)

__all__ = ["reduce_metrics", "weighted_mean"]

_REDUCTIONS = ("mean", "weighted_mean", "max", "min", "sum")


def _flat(key: str, value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().float().cpu().numpy()
    try:
        return np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise ValueError(f"metric {key!r} must hold numbers, got {value!r}") from e


def weighted_mean(values: list[float] | np.ndarray, weights: list[float] | np.ndarray | None = None) -> float:
    """``sum(w_i * v_i) / sum(w_i)``; without weights the plain mean. ``nan`` when the weights sum to 0.

    Example: values ``[0.8, 0.6]`` with weights ``[100, 200]`` (samples per rank) give ``(80 + 120) / 300``.
    """
    v = _flat("values", values)
    if weights is None or len(weights) == 0:
        return float(np.mean(v)) if v.size else float("nan")
    w = _flat("weights", weights)
    if v.shape != w.shape:
        raise ValueError(f"Values (len={v.size}) and weights (len={w.size}) must have same length")
    total = float(np.sum(w))
    return float("nan") if total == 0 else float(np.sum(v * w) / total)


def reduce_metrics(
    metrics: dict[str, Any],
    weights: dict[str, list[float]] | None = None,
    reduction_strategy: dict[str, str] | None = None,
) -> dict[str, float]:
    """Reduce every metric (a list, array, tensor or scalar) to one float.

    The reduction of ``key`` is ``reduction_strategy[key]`` if given (``mean``, ``weighted_mean``, ``max``, ``min``
    or ``sum``), else ``max`` if ``"max"`` is in the name, ``min`` if ``"min"`` is, else the mean (weighted by
    ``weights[key]`` when given). An empty list reduces to ``nan``.

    A :class:`~verl.reporting.metric.Metric` reduces with its own aggregation, a list of them (one per data-parallel
    rank, as ``DataProto.concat`` gathers them) with :meth:`Metric.aggregate_dp`.

    Example: ``{"loss": [1, 2, 3], "max_reward": [5, 8, 6]}`` -> ``{"loss": 2.0, "max_reward": 8.0}``.
    """
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, Metric):
            out[key] = value.aggregate()
            continue
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, Metric) for v in value):
            out[key] = Metric.aggregate_dp(list(value))
            continue
        flat = _flat(key, value)
        if flat.size == 0:
            out[key] = float("nan")
            continue
        if reduction_strategy and key in reduction_strategy:
            how = reduction_strategy[key]
            if how not in _REDUCTIONS:
                raise ValueError(f"reduction_strategy[{key!r}] must be one of {list(_REDUCTIONS)}, got {how!r}")
        elif "max" in key:
            how = "max"
        elif "min" in key:
            how = "min"
        else:
            how = "weighted_mean" if weights and key in weights else "mean"
        if how == "max":
            out[key] = float(np.max(flat))
        elif how == "min":
            out[key] = float(np.min(flat))
        elif how == "sum":
            out[key] = float(np.sum(flat))
        elif how == "weighted_mean":
            out[key] = weighted_mean(flat, (weights or {}).get(key))
        else:
            out[key] = float(np.mean(flat))
    return out
