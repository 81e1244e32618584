"""``verl.metrics.exporter``: the documents' module path of :class:`MetricsExporter`, kept importable.

The exporter is :mod:`verl.reporting.prometheus` (the tracking room); this module re-exports its names.
"""

from verl.reporting.prometheus import DEFAULT_NAMESPACE_LABEL, METRIC_SOURCES, MetricsExporter, memory_used_bytes

__all__ = ["DEFAULT_NAMESPACE_LABEL", "METRIC_SOURCES", "MetricsExporter", "memory_used_bytes"]
