"""MetricsExporter: a real HTTP scrape of /metrics and a real push to a local Pushgateway stand-in."""

from __future__ import annotations

import http.server
import threading
import urllib.request

import pytest

from verl.metrics import MetricsExporter

STEP_METRICS = {
    "timing_s/gen": 1.5,
    "actor/ppo_kl": 0.02,
    "actor/reward_kl_penalty": 0.125,  # KL to the reference wins over ppo_kl
    "critic/score/mean": 0.75,
    "timing_s/step": 4.0,
    "perf/throughput": 250.0,
}


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def _samples(text: str) -> dict[str, float]:
    """Exposition lines ``name{labels} value`` -> {"name{labels}": value} (comments skipped)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def test_serve_exposes_the_mapped_metrics_labelled_with_the_namespace():
    exporter = MetricsExporter(namespace="search-rl")
    try:
        port = exporter.serve(port=0)
        assert exporter._server.server_address[0] == "127.0.0.1"
        exporter.export(STEP_METRICS, step=3)
        samples = _samples(_scrape(port))
        ns = '{namespace="search-rl"}'
        assert samples[f"verl_kl_divergence{ns}"] == 0.125
        assert samples[f"verl_reward_mean{ns}"] == 0.75
        assert samples[f"verl_step_duration_seconds{ns}"] == 4.0
        assert samples[f"verl_tokens_per_second{ns}"] == 250.0
        assert samples[f"verl_global_step{ns}"] == 3.0
        assert samples[f"verl_memory_used_bytes{ns}"] > 1e6  # the RSS of a Python process with torch loaded
        # one latency observation of 1.5 s: below the 2.5 bucket, above the 1.0 bucket
        assert samples[f"verl_rollout_latency_seconds_count{ns}"] == 1.0
        assert samples[f"verl_rollout_latency_seconds_sum{ns}"] == 1.5
        assert samples['verl_rollout_latency_seconds_bucket{le="1.0",namespace="search-rl"}'] == 0.0
        assert samples['verl_rollout_latency_seconds_bucket{le="2.5",namespace="search-rl"}'] == 1.0
        # a second step: the histogram accumulates, gauges follow, missing metrics keep their value
        exporter.hook(4, {"timing_s/gen": 0.5, "actor/ppo_kl": 0.5})
        samples = _samples(_scrape(port))
        assert samples[f"verl_rollout_latency_seconds_count{ns}"] == 2.0
        assert samples[f"verl_rollout_latency_seconds_sum{ns}"] == 2.0
        assert samples[f"verl_kl_divergence{ns}"] == 0.5
        assert samples[f"verl_reward_mean{ns}"] == 0.75
        assert samples[f"verl_global_step{ns}"] == 4.0
    finally:
        exporter.close()
    with pytest.raises(OSError):
        _scrape(port)


def test_two_exporters_do_not_share_metrics():
    a, b = MetricsExporter(namespace="team-a"), MetricsExporter(namespace="team-b")
    try:
        pa, pb = a.serve(), b.serve()
        assert pa != pb
        a.export({"critic/score/mean": 1.0}, step=1)
        b.export({"critic/score/mean": 2.0}, step=1)
        text_a, text_b = _scrape(pa), _scrape(pb)
        assert 'verl_reward_mean{namespace="team-a"} 1.0' in text_a and "team-b" not in text_a
        assert 'verl_reward_mean{namespace="team-b"} 2.0' in text_b and "team-a" not in text_b
    finally:
        a.close()
        b.close()


def test_default_namespace_label_and_bad_values():
    exporter = MetricsExporter()
    values = exporter.export({"critic/score/mean": float("nan"), "timing_s/step": "fast"}, step=0)
    assert "verl_reward_mean" not in values and "verl_step_duration_seconds" not in values
    assert exporter.namespace == "default"
    with pytest.raises(TypeError, match="must be a dict"):
        exporter.export([1, 2], step=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no pushgateway_url"):
        exporter.push()


class _Recorder(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, str, str]] = []

    def _record(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        type(self).requests.append((self.command, self.path, body))
        self.send_response(200)
        self.end_headers()

    do_PUT = do_POST = _record

    def log_message(self, *args: object) -> None:
        pass


def test_export_pushes_to_the_gateway():
    _Recorder.requests = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        exporter = MetricsExporter(pushgateway_url=url, job_name="verl-test", namespace="search-rl")
        exporter.export(STEP_METRICS, step=2)
    finally:
        server.shutdown()
        server.server_close()
    assert len(_Recorder.requests) == 1
    method, path, body = _Recorder.requests[0]
    assert method == "PUT"
    assert path == "/metrics/job/verl-test/namespace/search-rl"
    assert 'verl_reward_mean{namespace="search-rl"} 0.75' in body
    assert 'verl_rollout_latency_seconds_count{namespace="search-rl"} 1.0' in body


def test_a_down_pushgateway_drops_metrics_not_the_run(verl_logs):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    exporter = MetricsExporter(pushgateway_url=url, push_timeout_s=1.0)
    warned = [r.getMessage() for r in verl_logs if r.levelno >= 30]
    assert any(f"Pushgateway {url} is not reachable" in m for m in warned)  # said at the start, before any step
    exported = exporter.export(STEP_METRICS, step=3)
    exporter.export(STEP_METRICS, step=4)
    warned = [r.getMessage() for r in verl_logs if r.levelno >= 30]
    assert exported["verl_global_step"] == 3.0  # the step itself went through
    assert exporter.push_failures == 2
    assert sum("not pushed to" in m for m in warned) == 1  # one warning, not one per step
    assert any("metrics of step 3 not pushed" in m for m in warned)
