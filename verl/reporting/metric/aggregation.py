"""A metric that carries its own reduction (upstream verl's ``verl.utils.metric.Metric`` / ``AggregationType``).

A worker returns ``{"critic/vf_loss": Metric("sum", [per-micro-batch losses])}`` and ``reduce_metrics`` reduces it
with the declared aggregation instead of guessing from the name. Across data-parallel ranks
(:meth:`Metric.aggregate_dp`), ``sum`` and ``mean`` metrics are first averaged rank-wise per micro-batch position
(every rank must hold as many values) and then reduced; ``min`` / ``max`` reduce over every value of every rank.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

import numpy as np
import torch

__all__ = ["AggregationType", "Metric"]


class AggregationType(Enum):
    """How a :class:`Metric`'s values reduce to one number."""

    MEAN = "mean"
    SUM = "sum"
    MIN = "min"
    MAX = "max"


_REDUCE = {
    AggregationType.MEAN: np.mean,
    AggregationType.SUM: np.sum,
    AggregationType.MIN: np.min,
    AggregationType.MAX: np.max,
}


class Metric:
    """Numbers collected during a step (ints, floats, one-element tensors) and the reduction that applies to them.

    Args:
        aggregation: ``"mean"``, ``"sum"``, ``"min"``, ``"max"`` or an :class:`AggregationType`.
        value: an initial number, list of numbers or :class:`Metric` (optional).
    """

    def __init__(self, aggregation: str | AggregationType, value: Any = None) -> None:
        try:
            self.aggregation = aggregation if isinstance(aggregation, AggregationType) else AggregationType(aggregation)
        except ValueError as e:
            names = [a.value for a in AggregationType]
            raise ValueError(f"Unsupported aggregation type: {aggregation!r}; use one of {names}") from e
        self.values: list[float | int] = []
        if value is not None:
            if isinstance(value, (list, tuple, Metric)):
                self.extend(value)
            else:
                self.append(value)

    def append(self, value: Any) -> None:
        """Add one number (a one-element tensor is converted with ``.item()``); a Metric adds all of its values."""
        if isinstance(value, Metric):
            self.extend(value)
            return
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(f"a Metric value must be a scalar tensor, got shape {tuple(value.shape)}")
            value = value.detach().item()
        elif isinstance(value, np.ndarray):
            if value.size != 1:
                raise ValueError(f"a Metric value must be a scalar array, got shape {value.shape}")
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"Unsupported value type: {type(value).__name__} ({value!r})")
        self.values.append(value)

    def extend(self, values: Metric | Iterable[Any]) -> None:
        """Add several numbers; a Metric must have the same aggregation."""
        if isinstance(values, Metric):
            if values.aggregation != self.aggregation:
                raise ValueError(f"Aggregation type mismatch: {self.aggregation} != {values.aggregation}")
            values = values.values
        for value in values:
            self.append(value)

    def aggregate(self) -> float:
        """The values reduced with this metric's aggregation (``nan`` when there are none)."""
        return self._aggregate(self.values, self.aggregation)

    @staticmethod
    def _aggregate(values: Any, aggregation: AggregationType) -> float:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
        return float("nan") if arr.size == 0 else float(_REDUCE[aggregation](arr))

    @classmethod
    def aggregate_dp(cls, metric_lists: list[Metric]) -> float:
        """Reduce one metric gathered from every data-parallel rank: ``[num_ranks]`` Metrics of ``[num_micro]``
        values each. ``mean`` / ``sum``: the rank-wise mean per micro-batch position, then the aggregation (a summed
        loss is the sum over micro-batches of the ranks' average); ``min`` / ``max``: over every value."""
        if not metric_lists:
            raise ValueError("Cannot aggregate an empty list of metrics.")
        lengths = [len(m.values) for m in metric_lists]
        if len(set(lengths)) != 1:
            raise ValueError(f"All Metric instances must have the same number of values for dp aggregation: {lengths}")
        aggregation = metric_lists[0].aggregation
        if any(m.aggregation != aggregation for m in metric_lists):
            raise ValueError(f"Aggregation type mismatch across ranks: {[m.aggregation.value for m in metric_lists]}")
        table = np.asarray([m.values for m in metric_lists], dtype=np.float64)  # [num_ranks, num_micro]
        if aggregation in (AggregationType.MEAN, AggregationType.SUM):
            return cls._aggregate(table.mean(axis=0), aggregation)
        return cls._aggregate(table.reshape(-1), aggregation)

    @classmethod
    def from_dict(cls, data: dict[str, Any], aggregation: str | AggregationType) -> dict[str, Metric]:
        """``{name: value}`` -> ``{name: Metric(aggregation, value)}``."""
        return {key: cls(aggregation=aggregation, value=value) for key, value in data.items()}

    def init_list(self) -> Metric:
        """An empty Metric with the same aggregation."""
        return Metric(aggregation=self.aggregation)

    def __repr__(self) -> str:
        return f"Metric({self.aggregation.value!r}, {self.values!r})"
