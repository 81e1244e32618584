"""Prometheus metrics of the inference service, served as text at ``GET /metrics``.

==========================================  =========  ===========================================================
``verl_serve_requests_total``               counter    answered requests, labels ``endpoint`` and ``status`` (code)
``verl_serve_prompt_tokens_total``          counter    prompt tokens of completed requests
``verl_serve_generated_tokens_total``       counter    generated tokens of completed requests
``verl_serve_request_latency_seconds``      histogram  arrival to last byte, label ``endpoint`` (completed requests)
``verl_serve_queue_wait_seconds``           histogram  time a request waited for its batch
``verl_serve_batch_size``                   histogram  requests decoded together in one engine batch
``verl_serve_queue_depth``                  gauge      requests waiting for a batch
``verl_serve_running_requests``             gauge      requests in the batch being decoded
``verl_serve_memory_used_bytes``            gauge      GPU memory allocated (CUDA) or resident set size, at scrape
==========================================  =========  ===========================================================

Each app owns its registry, so several servers (tests) in one process do not clash.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from verl.reporting.prometheus import memory_used_bytes

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class ServeMetrics:
    """The service's metrics in a registry of their own (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "verl_serve_requests", "answered requests", ["endpoint", "status"], registry=r
        )  # exposed as verl_serve_requests_total
        self.prompt_tokens = Counter("verl_serve_prompt_tokens", "prompt tokens of completed requests", registry=r)
        self.generated_tokens = Counter(
            "verl_serve_generated_tokens", "generated tokens of completed requests", registry=r
        )
        self.latency = Histogram(
            "verl_serve_request_latency_seconds",
            "request latency, arrival to response",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "verl_serve_queue_wait_seconds", "time waited for a batch", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.batch_size = Histogram(
            "verl_serve_batch_size", "requests decoded together in one batch", buckets=_BATCH_BUCKETS, registry=r
        )
        self.queue_depth = Gauge("verl_serve_queue_depth", "requests waiting for a batch", registry=r)
        self.running = Gauge("verl_serve_running_requests", "requests in the batch being decoded", registry=r)
        self.memory = Gauge(
            "verl_serve_memory_used_bytes", "GPU memory allocated (CUDA) or resident set size", registry=r
        )
        self.memory.set_function(lambda: float(memory_used_bytes()))

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
