"""Monitoring: export training metrics to Prometheus (push to a Pushgateway, or serve ``/metrics``).

The documents' import path of :class:`MetricsExporter`; the exporter lives with the rest of a run's observability in
:mod:`verl.reporting.prometheus`.
"""

from verl.reporting.prometheus import DEFAULT_NAMESPACE_LABEL, METRIC_SOURCES, MetricsExporter, memory_used_bytes

__all__ = ["DEFAULT_NAMESPACE_LABEL", "METRIC_SOURCES", "MetricsExporter", "memory_used_bytes"]
