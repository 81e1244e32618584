"""``MetricsExporter``: the training metrics of each step as Prometheus metrics, labelled with the namespace.

Exported (all with the label ``namespace``):

==================================  =========  ==========================================================
``verl_rollout_latency_seconds``    histogram  one observation per step of ``timing_s/gen``
``verl_kl_divergence``              gauge      first present of ``eval/kl_ref``, ``actor/reward_kl_penalty``,
                                               ``actor/kl_loss``, ``actor/ppo_kl``
``verl_reward_mean``                gauge      ``critic/score/mean``
``verl_step_duration_seconds``      gauge      ``timing_s/step``
``verl_tokens_per_second``          gauge      ``perf/throughput``
``verl_memory_used_bytes``          gauge      measured at export: GPU memory allocated when CUDA is in use, else
                                               the resident set size of this process
``verl_global_step``                gauge      the ``step`` passed to :meth:`MetricsExporter.export`
==================================  =========  ==========================================================

Each exporter owns its ``CollectorRegistry``, so two trainers in one process never share or clash on metrics.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Mapping
from typing import Any

import torch
from prometheus_client import CollectorRegistry, Gauge, Histogram, push_to_gateway, start_http_server

__all__ = ["DEFAULT_NAMESPACE_LABEL", "METRIC_SOURCES", "MetricsExporter", "memory_used_bytes"]

logger = logging.getLogger(__name__)

DEFAULT_NAMESPACE_LABEL = "default"

# Prometheus gauge -> the verl metric names that feed it, first present wins.
METRIC_SOURCES: dict[str, tuple[str, ...]] = {
    "verl_kl_divergence": ("eval/kl_ref", "actor/reward_kl_penalty", "actor/kl_loss", "actor/ppo_kl"),
    "verl_reward_mean": ("critic/score/mean",),
    "verl_step_duration_seconds": ("timing_s/step",),
    "verl_tokens_per_second": ("perf/throughput",),
}
_LATENCY_SOURCE = "timing_s/gen"
_DEFAULT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_HELP = {
    "verl_kl_divergence": "KL divergence of the policy (to the reference when available)",
    "verl_reward_mean": "mean sequence score of the training batch",
    "verl_step_duration_seconds": "wall time of the last training step",
    "verl_tokens_per_second": "training throughput in tokens per second per rank",
    "verl_memory_used_bytes": "GPU memory allocated (CUDA) or resident set size of the driver process",
    "verl_global_step": "last exported global step",
}


def memory_used_bytes() -> int:
    """GPU memory currently allocated by torch when CUDA is initialised, else this process's RSS in bytes."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.memory_allocated())
    try:
        import psutil

        return int(psutil.Process(os.getpid()).memory_info().rss)
    except ImportError:  # pragma: no cover - psutil ships with ray
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _number(key: str, value: Any) -> float | None:
    """A finite float from a metric value (number, 0-d tensor, list -> mean), else None."""
    if isinstance(value, torch.Tensor):
        value = value.detach().float().mean().item() if value.numel() else None
    elif isinstance(value, (list, tuple)):
        value = sum(float(v) for v in value) / len(value) if value else None
    try:
        out = float(value) if value is not None else None
    except (TypeError, ValueError):
        logger.warning("metric %s: cannot export non-numeric value %r", key, value)
        return None
    return out if out is not None and math.isfinite(out) else None


class MetricsExporter:
    """Export per-step training metrics to Prometheus.

    Args:
        pushgateway_url: when set, every :meth:`export` pushes the registry to this Pushgateway
            (``http://host:9091``), grouped by ``job_name`` and the namespace.
        job_name: the Pushgateway job.
        namespace: the trainer namespace, used as the value of the ``namespace`` label (``"default"`` if None).
        latency_buckets: histogram buckets of ``verl_rollout_latency_seconds`` (seconds).
        push_timeout_s: HTTP timeout of a push.

    Example::

        exporter = MetricsExporter(namespace="search-rl")
        port = exporter.serve(port=9100)             # http://127.0.0.1:9100/metrics
        trainer.step_hooks.append(exporter.hook)     # or exporter.export(metrics, step) yourself
    """

    def __init__(
        self,
        pushgateway_url: str | None = None,
        job_name: str = "verl",
        namespace: str | None = None,
        latency_buckets: tuple[float, ...] = _DEFAULT_BUCKETS,
        push_timeout_s: float = 10.0,
    ) -> None:
        if not job_name or not isinstance(job_name, str):
            raise ValueError(f"MetricsExporter: job_name must be a non-empty string, got {job_name!r}")
        self.pushgateway_url = pushgateway_url
        self.job_name = job_name
        self.namespace = namespace or DEFAULT_NAMESPACE_LABEL
        self.push_timeout_s = push_timeout_s
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["namespace"]
        self._latency = Histogram(
            "verl_rollout_latency_seconds",
            "wall time of rollout generation per step",
            labels,
            registry=self.registry,
            buckets=latency_buckets,
        )
        self._gauges: dict[str, Gauge] = {
            name: Gauge(name, _HELP[name], labels, registry=self.registry)
            for name in (*METRIC_SOURCES, "verl_memory_used_bytes", "verl_global_step")
        }
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.push_failures = 0  # pushes that failed (their metrics were dropped, with a warning)
        if pushgateway_url:
            self.check_pushgateway()

    def check_pushgateway(self, timeout_s: float = 3.0) -> bool:
        """Whether the Pushgateway answers; warns (at the start, before any step) when it does not. A later push
        to a gateway that is down drops that step's metrics with a warning, it never stops training."""
        import urllib.error
        import urllib.request

        url = str(self.pushgateway_url)
        target = url if "://" in url else f"http://{url}"
        try:
            with urllib.request.urlopen(target.rstrip("/") + "/-/healthy", timeout=timeout_s):
                return True
        except urllib.error.HTTPError:
            return True  # something answers HTTP there: pushes will say what is wrong
        except (OSError, ValueError) as e:
            logger.warning(
                "Pushgateway %s is not reachable (%s: %s); metrics will be dropped until it is",
                url,
                type(e).__name__,
                e,
            )
            return False

    # ------------------------------------------------------------------------------------------------ export
    def export(self, metrics: Mapping[str, Any], step: int) -> dict[str, float]:
        """Map one step's verl metrics onto the Prometheus metrics, then push when a Pushgateway is configured.

        Returns the values set (Prometheus name -> value), useful for logging and tests. A metric missing from
        ``metrics`` leaves its gauge at its previous value.
        """
        if not isinstance(metrics, Mapping):
            raise TypeError(f"MetricsExporter.export: metrics must be a dict, got {type(metrics).__name__}")
        ns = self.namespace
        exported: dict[str, float] = {}
        with self._lock:
            latency = _number(_LATENCY_SOURCE, metrics.get(_LATENCY_SOURCE))
            if latency is not None:
                self._latency.labels(namespace=ns).observe(latency)
                exported["verl_rollout_latency_seconds"] = latency
            for name, sources in METRIC_SOURCES.items():
                for key in sources:
                    value = _number(key, metrics.get(key))
                    if value is not None:
                        self._gauges[name].labels(namespace=ns).set(value)
                        exported[name] = value
                        break
            mem = float(memory_used_bytes())
            self._gauges["verl_memory_used_bytes"].labels(namespace=ns).set(mem)
            exported["verl_memory_used_bytes"] = mem
            self._gauges["verl_global_step"].labels(namespace=ns).set(int(step))
            exported["verl_global_step"] = float(step)
        if self.pushgateway_url:
            try:
                self.push()
            except Exception as e:  # an unreachable or failing Pushgateway costs these metrics, never the run
                self.push_failures += 1
                if self.push_failures == 1 or self.push_failures % 100 == 0:
                    logger.warning(
                        "metrics of step %d not pushed to %s (%s: %s); training goes on, %d pushes failed so far",
                        step,
                        self.pushgateway_url,
                        type(e).__name__,
                        e,
                        self.push_failures,
                    )
        return exported

    def hook(self, step: int, metrics: Mapping[str, Any]) -> None:
        """``fn(step, metrics)`` form of :meth:`export`, for ``RayPPOTrainer.step_hooks``."""
        self.export(metrics, step)

    def push(self) -> None:
        """Push the whole registry to the Pushgateway (HTTP PUT ``/metrics/job/<job>/namespace/<ns>``)."""
        if not self.pushgateway_url:
            raise ValueError("MetricsExporter.push: no pushgateway_url configured")
        push_to_gateway(
            self.pushgateway_url,
            job=self.job_name,
            registry=self.registry,
            grouping_key={"namespace": self.namespace},
            timeout=self.push_timeout_s,
        )

    # ----------------------------------------------------------------------------------------------- serving
    def serve(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` over HTTP on ``addr:port`` (loopback only unless ``addr`` says otherwise) in a
        daemon thread; ``port=0`` picks a free port. Returns the bound port."""
        if self._server is not None:
            raise RuntimeError(f"MetricsExporter is already serving on port {self.port}")
        self._server, self._thread = start_http_server(int(port), addr=addr, registry=self.registry)
        return self.port

    @property
    def port(self) -> int | None:
        """The port being served, or None."""
        return None if self._server is None else int(self._server.server_address[1])

    def close(self) -> None:
        """Stop serving (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> MetricsExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
