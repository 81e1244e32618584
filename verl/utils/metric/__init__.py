"""Metric helpers (verl's ``verl.utils.metric``): reduce per-worker / per-micro-batch metric lists to scalars."""

from verl.utils.metric.utils import reduce_metrics, weighted_mean

__all__ = ["reduce_metrics", "weighted_mean"]
