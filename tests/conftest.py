"""Shared test setup: one torch thread (the suite runs on 2 cores), deterministic seeds, tiny model fixtures."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# A guard only: verl itself starts local Rays on loopback (verl.single_controller.ray.cluster), and
# tests/single_controller/test_loopback_only.py checks that without this variable.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def byte_tokenizer():
    """A byte-level tokenizer (one token per byte) built locally."""
    from verl.models.tiny import make_byte_tokenizer

    return make_byte_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A directory holding a tiny random Llama and its byte tokenizer, usable as a model path."""
    from verl.models.tiny import make_tiny_model_dir

    return make_tiny_model_dir(str(tmp_path_factory.mktemp("tiny_llama")))


@pytest.fixture(scope="session")
def model_dir_with_code(tmp_path_factory) -> str:
    """A tiny Llama directory whose config.json maps AutoModelForCausalLM to a module of its own (``auto_map``), as a
    repository that needs ``trust_remote_code`` does; the module raises if it is ever imported."""
    import json

    from verl.models.tiny import make_tiny_model_dir

    path = make_tiny_model_dir(str(tmp_path_factory.mktemp("tiny_with_code")))
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    with open(os.path.join(path, "modeling_custom.py"), "w", encoding="utf-8") as f:
        f.write("raise RuntimeError('the model directory's own code ran')\n")
    return path


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory) -> str:
    """A directory holding a tiny random Qwen2 (tied embeddings) and its byte tokenizer."""
    from verl.models.tiny import TinyModelSpec, make_tiny_model_dir

    spec = TinyModelSpec(arch="qwen2", tie_word_embeddings=True)
    return make_tiny_model_dir(str(tmp_path_factory.mktemp("tiny_qwen2")), spec=spec)


@pytest.fixture(autouse=True)
def _no_leaked_process_group(request):
    """A test that initialises torch.distributed in the pytest process must tear it down (later tests need a clean
    process); fail the leaking test rather than a random later one. vLLM engines own a 1-rank group for their
    lifetime (module-scoped fixtures), so tests marked ``vllm`` are exempt."""
    import torch.distributed as dist

    before = dist.is_available() and dist.is_initialized()
    yield
    if before or request.node.get_closest_marker("vllm") is not None:
        return
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        pytest.fail(f"{request.node.nodeid} left a torch.distributed process group initialised")


@pytest.fixture
def single_rank_group(tmp_path):
    """A 1-rank gloo process group in this process for FSDP2/DTensor tests. An existing 1-rank group (an in-process
    vLLM engine keeps one) is reused and left alone; a group created here is destroyed afterwards."""
    import torch.distributed as dist

    if dist.is_initialized():
        assert dist.get_world_size() == 1, "expected no process group, or a 1-rank one"
        yield
        return
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/single_rank_pg", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def verl_logs():
    """What verl's own loggers (``verl.*``) emit during the test, as a list of LogRecords. Attached to the ``verl``
    logger itself, so it sees every record whatever handlers and filters the root logger carries (pytest's caplog
    lives on the root and shares its fate)."""
    handler = _ListHandler()
    verl_logger = logging.getLogger("verl")
    previous = verl_logger.level
    verl_logger.addHandler(handler)
    verl_logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        verl_logger.removeHandler(handler)
        verl_logger.setLevel(previous)


# ------------------------------------------------------------------------------ scripted LLM-judge endpoint
class _JudgeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # the default backlog of 5 would hold back concurrent connections


def _judge_verdict(content: str) -> tuple[int, str]:
    """The scripted judge: HTTP status and answer for one judge prompt."""
    pair = re.search(r"A:(.*)\|B:(.*)", content, re.S)
    if pair:  # pairwise: prefers the response that says "good"; between equals, A
        a_good, b_good = "good" in pair.group(1), "good" in pair.group(2)
        return 200, "[[B]]" if b_good and not a_good else "[[A]]"
    if "fail" in content:
        return 500, ""
    if "unparsable" in content:
        return 200, "I would rather not say."
    if "toolarge" in content:
        return 200, "Rating: [[11]]"
    return 200, "Fine. Rating: [[8]]" if "good" in content else "Weak. Rating: [[2]]"


@pytest.fixture
def judge_server():
    """A scripted OpenAI-compatible judge on 127.0.0.1 (answers by :func:`_judge_judge_verdict`); the state records the
    request count, bodies, arrival times (``time.perf_counter``) and the most requests in flight; ``delay`` (s)
    holds each answer back."""
    state = {"in_flight": 0, "max_in_flight": 0, "requests": 0, "bodies": [], "arrivals": [], "delay": 0.0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                state["in_flight"] += 1
                state["requests"] += 1
                state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
                state["bodies"].append(body)
                state["arrivals"].append(time.perf_counter())
            time.sleep(state["delay"])
            code, answer = _judge_verdict(body["messages"][-1]["content"])
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
            with lock:
                state["in_flight"] -= 1
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = _JudgeServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield state
    server.shutdown()
    server.server_close()


class RunAhead:
    """Child processes started ahead of the tests that check them, two at a time (CI has 2 cores, and a test
    waiting on one single-threaded child leaves the other core idle). ``commands``: ``{key: subprocess.run keyword
    arguments}`` (``args`` included; output is captured as text), started in this order; :meth:`result` waits for
    one and returns its ``CompletedProcess``, or raises what running it raised (a timeout)."""

    def __init__(self, commands: dict[str, dict], width: int = 2) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix="run_ahead")
        self._futures = {key: self._pool.submit(self._run, kwargs) for key, kwargs in commands.items()}

    @staticmethod
    def _run(kwargs: dict):
        import subprocess

        return subprocess.run(capture_output=True, text=True, **kwargs)

    def __contains__(self, key: str) -> bool:
        return key in self._futures

    def result(self, key: str):
        return self._futures[key].result()

    def close(self) -> None:
        """Drop what has not started (a test that failed before waiting); wait for what runs."""
        self._pool.shutdown(wait=True, cancel_futures=True)


class _RunAheadFactory:
    """What the ``run_ahead`` fixture gives: :meth:`start` builds a :class:`RunAhead`; :meth:`selected` says which
    parameter values this session will test."""

    def __init__(self) -> None:
        self.made: list[RunAhead] = []

    def start(self, commands: dict[str, dict], width: int = 2) -> RunAhead:
        self.made.append(RunAhead(commands, width))
        return self.made[-1]

    @staticmethod
    def selected(request, name: str) -> list:
        """The values of parameter ``name`` among this session's selected tests in ``request``'s module, in order
        (a module fixture starts only the children of the tests that will run)."""
        return [
            item.callspec.params[name]
            for item in request.session.items
            if getattr(item, "module", None) is request.module
            and name in getattr(getattr(item, "callspec", None), "params", {})
        ]


@pytest.fixture(scope="session")
def run_ahead():
    """A :class:`_RunAheadFactory`; every :class:`RunAhead` it started is closed at the end of the session (a module
    fixture closes its own at the end of its module)."""
    factory = _RunAheadFactory()
    yield factory
    for runs in factory.made:
        runs.close()
