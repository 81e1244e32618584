"""Monitoring: export training metrics to Prometheus (push to a Pushgateway, or serve ``/metrics``)."""

from verl.metrics.exporter import DEFAULT_NAMESPACE_LABEL, METRIC_SOURCES, MetricsExporter, memory_used_bytes

__all__ = ["DEFAULT_NAMESPACE_LABEL", "METRIC_SOURCES", "MetricsExporter", "memory_used_bytes"]
