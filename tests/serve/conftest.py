"""A real uvicorn server on a free local port, in a thread of the test process, serving a tiny model."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from verl.serve import ServeConfig, create_app


class RunningServer:
    """A started server: ``url`` to send requests to, ``stop()`` to shut it down (lifespan included)."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.server = uvicorn.Server(uvicorn.Config(create_app(config), host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)

    def start(self, timeout_s: float = 60.0) -> RunningServer:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server thread exited during start-up (see the log above)")
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start")
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            raise RuntimeError("the server did not shut down")


@contextmanager
def serving(config: ServeConfig) -> Iterator[RunningServer]:
    """Run a server for the duration of the block."""
    server = RunningServer(config).start()
    try:
        yield server
    finally:
        server.stop()


def metric_value(text: str, name: str) -> float:
    """The value of an unlabelled sample ``name`` in a Prometheus text exposition."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


@pytest.fixture(scope="session")
def start_server():
    """``start_server(config)``: a context manager running a server on a free port for the block."""
    return serving


@pytest.fixture(scope="session")
def metric():
    """``metric(text, name)``: an unlabelled sample's value from ``/metrics`` text."""
    return metric_value


@pytest.fixture(scope="module")
def server(tiny_model_dir: str) -> Iterator[RunningServer]:
    """Batching on, held open 150 ms so concurrent test requests land in one batch."""
    config = ServeConfig(model=tiny_model_dir, engine="hf", max_batch_size=16, batch_wait_ms=150, max_new_tokens=64)
    with serving(config) as srv:
        yield srv


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c
