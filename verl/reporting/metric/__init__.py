"""Metric helpers (verl's ``verl.utils.metric``, the same package): reduce per-worker / per-micro-batch metric lists
to scalars; :class:`Metric` carries its own reduction (:class:`AggregationType`)."""

from verl.reporting.metric.aggregation import AggregationType, Metric
from verl.reporting.metric.utils import reduce_metrics, weighted_mean

__all__ = ["AggregationType", "Metric", "reduce_metrics", "weighted_mean"]
