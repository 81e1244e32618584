"""Metric helpers (verl's ``verl.utils.metric``): reduce per-worker / per-micro-batch metric lists to scalars;
:class:`Metric` carries its own reduction (:class:`AggregationType`)."""

from verl.utils.metric.aggregation import AggregationType, Metric
from verl.utils.metric.utils import reduce_metrics, weighted_mean

__all__ = ["AggregationType", "Metric", "reduce_metrics", "weighted_mean"]
