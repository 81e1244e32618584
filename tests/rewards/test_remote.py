"""Remote reward client against a real HTTP server on 127.0.0.1: success, retries, slow and failing endpoints."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from verl.rewards.remote import RemoteRewardClient, RemoteRewardError, make_remote_compute_score


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # the slow endpoint writes to sockets whose client already timed out (broken pipe): expected


def _make_server():
    state = _State()

    class Handler(BaseHTTPRequestHandler):
        counted = False  # this request is in state.in_flight

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def _reply(self, code: int, payload) -> None:
            body = json.dumps(payload).encode()
            self._leave()  # before the client can read the answer and send its next request
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _leave(self) -> None:
            with state.lock:
                if self.counted:
                    state.in_flight -= 1
                    self.counted = False

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests[self.path] = state.requests.get(self.path, 0) + 1
                count = state.requests[self.path]
                state.bodies.append(body)
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
                self.counted = True
            try:
                if self.path == "/score":
                    time.sleep(0.02)  # long enough for concurrent requests to overlap
                    ok = body["solution_str"].strip() == str(body["ground_truth"])
                    self._reply(200, {"score": 1.0 if ok else 0.0, "judge": "exact"})
                elif self.path == "/number":
                    self._reply(200, 0.5)
                elif self.path == "/flaky":  # fails twice, then works
                    if count <= 2:
                        self._reply(503, {"error": "busy"})
                    else:
                        self._reply(200, {"score": 1.0})
                elif self.path == "/slow":
                    time.sleep(0.5)
                    self._reply(200, {"score": 1.0})
                elif self.path == "/fail":
                    self._reply(500, {"error": "boom"})
                elif self.path == "/bad_request":
                    self._reply(400, {"error": "bad"})
                elif self.path == "/no_score":
                    self._reply(200, {"value": 1})
                else:
                    self._reply(404, {})
            finally:
                self._leave()

    server = _QuietServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    return server, state


@pytest.fixture
def server():
    srv, state = _make_server()
    yield f"http://127.0.0.1:{srv.server_address[1]}", state
    srv.shutdown()
    srv.server_close()


def test_success_and_request_body(server):
    base, state = server
    client = RemoteRewardClient(base + "/score", timeout_s=2, max_retries=0)
    result = client("arithmetic", " 42", "42", extra_info={"index": np.int64(3), "arr": np.array([1, 2])})
    assert result == {"score": 1.0, "judge": "exact"}
    assert state.bodies[0] == {
        "data_source": "arithmetic",
        "solution_str": " 42",
        "ground_truth": "42",
        "extra_info": {"index": 3, "arr": [1, 2]},
    }
    assert RemoteRewardClient(base + "/number")("a", "b", "c") == 0.5


def test_retries_with_backoff_then_success(server):
    base, state = server
    client = RemoteRewardClient(base + "/flaky", timeout_s=2, max_retries=3, backoff_s=0.05)
    start = time.monotonic()
    assert client("s", "x", "y") == 1.0
    assert state.requests["/flaky"] == 3
    assert time.monotonic() - start >= 0.05 + 0.1  # two backoffs: 0.05, then doubled


def test_failing_endpoint_exhausts_retries(server):
    base, state = server
    client = RemoteRewardClient(base + "/fail", timeout_s=2, max_retries=2, backoff_s=0.01)
    with pytest.raises(RemoteRewardError, match=r"/fail failed after 3 attempt\(s\) for data_source='src': HTTP 500"):
        client("src", "x", "y")
    assert state.requests["/fail"] == 3


def test_client_error_is_not_retried(server):
    base, state = server
    with pytest.raises(RemoteRewardError, match="HTTP 400"):
        RemoteRewardClient(base + "/bad_request", max_retries=3, backoff_s=0.01)("s", "x", "y")
    assert state.requests["/bad_request"] == 1
    with pytest.raises(RemoteRewardError, match="no 'score' key"):
        RemoteRewardClient(base + "/no_score", max_retries=0)("s", "x", "y")


def test_slow_endpoint_times_out(server):
    base, state = server
    client = RemoteRewardClient(base + "/slow", timeout_s=0.1, max_retries=1, backoff_s=0.01)
    with pytest.raises(RemoteRewardError, match="2 attempt"):
        client("s", "x", "y")
    assert state.requests["/slow"] == 2


def test_batch_is_concurrent_but_bounded(server):
    base, state = server
    client = make_remote_compute_score({"url": base + "/score", "timeout_s": 2, "max_retries": 0, "max_concurrency": 3})
    n = 12
    results = client.compute_score_batch(["arithmetic"] * n, [str(i) for i in range(n)], [str(i % 2) for i in range(n)])
    scores = [r["score"] for r in results]
    assert scores == [1.0 if str(i) == str(i % 2) else 0.0 for i in range(n)]
    assert 1 < state.max_in_flight <= 3


def test_batch_keeps_per_sample_errors():
    # nothing listens on this port: every request fails quickly, each slot holds its own error
    client = RemoteRewardClient("http://127.0.0.1:9/x", timeout_s=0.5, max_retries=0)
    results = client.compute_score_batch(["a", "b"], ["1", "2"], ["1", "2"], [None, None])
    assert all(isinstance(r, RemoteRewardError) for r in results)
    assert "data_source='b'" in str(results[1])


def test_bad_config():
    with pytest.raises(ValueError, match="http"):
        RemoteRewardClient("ftp://x")
    with pytest.raises(ValueError, match="max_concurrency"):
        RemoteRewardClient("http://x", max_concurrency=0)
