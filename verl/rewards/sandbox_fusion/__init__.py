"""Client of a Sandbox Fusion server (https://github.com/bytedance/SandboxFusion) for code rewards.

For users who run such a server: set ``reward_model.sandbox_fusion.url`` (e.g. ``http://host:8080/run_code``) and
the code data sources of ``default_compute_score`` are executed there instead of in the local sandbox. Same call
as verl's ``sandbox_fusion.compute_score(sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, completion,
test_cases, continuous=False, timeout=10) -> (score, metadata_list)``.

Protocol (Sandbox Fusion's ``run_code`` endpoint): one HTTP POST per test with the JSON body ``{"code", "stdin",
"language", "compile_timeout", "run_timeout", "memory_limit_MB", "files": {}, "fetch_files": []}``; the reply holds
``status`` (``Success`` | ``Failed`` | ``SandboxError``), ``compile_result`` and ``run_result`` (``status``:
``Finished`` | ``TimeLimitExceeded`` | ``Error``, ``return_code``, ``stdout``, ``stderr``, ``execution_time``). A
gateway timeout (HTTP 504) is retried with a growing delay; other HTTP or connection errors are reported per test.
Per-test results follow verl's codes: ``True`` passed, ``False`` wrong answer, ``-1`` API/sandbox error, ``-2``
runtime error, ``-3`` time limit, ``-4`` compile error.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.rewards.code_exec import extract_code
from verl.rewards.prime_code import CONTINUOUS_MAX_TESTS, apps_to_code_exec_spec, load_test_cases

__all__ = ["ProcessLocalSemaphore", "call_sandbox_api", "check_correctness", "compute_score"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 10
MAX_RETRIES = 3
INITIAL_RETRY_DELAY_S = 1.0
# Seconds added to compile + run time for the HTTP round trip itself.
API_TIMEOUT_S = 10
MAX_WORKERS = 32


class ProcessLocalSemaphore:
    """A bounded semaphore that survives pickling: each process that unpickles it gets its own lock of ``value``.

    Reward functions may be shipped to reward worker processes; a ``threading.Semaphore`` cannot travel, and a
    ``multiprocessing.Manager`` semaphore needs a server process. This bounds the requests in flight per process.
    """

    def __init__(self, value: int) -> None:
        if int(value) < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {value}")
        self.value = int(value)
        self._lock = threading.BoundedSemaphore(self.value)

    def __getstate__(self) -> dict[str, Any]:
        return {"value": self.value}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["value"])

    def __enter__(self) -> ProcessLocalSemaphore:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def call_sandbox_api(
    sandbox_fusion_url: str,
    code: str,
    stdin: str,
    compile_timeout: int,
    run_timeout: int,
    memory_limit_mb: int | None = None,
    language: str = "python",
) -> tuple[dict[str, Any] | None, str | None]:
    """POST one program to the server: ``(response_json, None)`` on success, ``(None, error message)`` otherwise."""
    body: dict[str, Any] = {
        "compile_timeout": compile_timeout,
        "run_timeout": run_timeout,
        "code": code,
        "stdin": stdin,
        "language": language,
        "files": {},
        "fetch_files": [],
    }
    if memory_limit_mb is not None:
        body["memory_limit_MB"] = int(memory_limit_mb)
    payload = json.dumps(body).encode("utf-8")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    request_timeout = compile_timeout + run_timeout + API_TIMEOUT_S
    last_error = "no attempt made"
    for attempt in range(MAX_RETRIES):
        request = urllib.request.Request(sandbox_fusion_url, data=payload, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=request_timeout) as response:
                text = response.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as e:
            last_error = f"HTTP {e.code} from {sandbox_fusion_url}"
            if e.code == 504 and attempt < MAX_RETRIES - 1:
                time.sleep(INITIAL_RETRY_DELAY_S * (attempt + 1))
                continue
            break
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            last_error = f"cannot reach {sandbox_fusion_url}: {getattr(e, 'reason', e)}"
            break
        try:
            return json.loads(text), None
        except json.JSONDecodeError as e:
            last_error = f"reply of {sandbox_fusion_url} is not JSON ({e}): {text[:120]!r}"
            break
    logger.warning("Sandbox Fusion call failed: %s", last_error)
    return None, f"API Call Failed: {last_error}"


def _judge(api_response: dict[str, Any] | None, error: str | None, expected: str | None) -> tuple[Any, dict]:
    """verl's per-test result code and metadata from one API reply (``expected`` None: exit status only)."""
    meta: dict[str, Any] = {"api_request_error": error, "status": "unknown", "stdout": None, "stderr": None}
    if error or api_response is None:
        meta["status"] = "api_error"
        return -1, meta
    api_status = api_response.get("status")
    compile_result = api_response.get("compile_result") or {}
    run_result = api_response.get("run_result") or {}
    meta.update(
        api_status=api_status,
        compile_status=compile_result.get("status"),
        run_status=run_result.get("status"),
        stdout=run_result.get("stdout"),
        stderr=run_result.get("stderr"),
        exit_code=run_result.get("return_code"),
        duration=run_result.get("execution_time"),
    )
    if api_status == "SandboxError":
        meta["status"] = "sandbox_error"
        return -1, meta
    if api_status == "Failed":
        cstatus = compile_result.get("status")
        if compile_result and (cstatus in ("Error", "TimeLimitExceeded") or compile_result.get("return_code")):
            meta["status"] = "compile_timeout" if cstatus == "TimeLimitExceeded" else "compile_error"
            return -4, meta
        if run_result.get("status") == "TimeLimitExceeded":
            meta["status"] = "timeout"
            return -3, meta
        if run_result:
            meta["status"] = "runtime_error"
            return -2, meta
        meta["status"] = "unknown_failure"
        return -1, meta
    if api_status == "Success" and run_result.get("status") == "Finished":
        if expected is None:
            ok = run_result.get("return_code") == 0
        else:
            ok = str(run_result.get("stdout") or "").rstrip("\n") == str(expected).rstrip("\n")
        meta["status"] = "success" if ok else "wrong_answer"
        return ok, meta
    meta["status"] = f"unexpected_api_status_{api_status}"
    return -1, meta


def check_correctness(
    sandbox_fusion_url: str,
    in_outs: dict[str, Any] | None,
    generation: str,
    timeout: int = DEFAULT_TIMEOUT,
    memory_limit_mb: int | None = None,
    language: str = "python",
    concurrent_semaphore: Any = None,
    limit: int | None = None,
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Run ``generation`` on every test of ``in_outs`` (APPS format) on the server, tests in parallel.

    Returns ``(results, metadata_list)`` in test order; ``concurrent_semaphore`` (a threading or multiprocessing
    semaphore) bounds the number of requests in flight across all callers sharing it.
    """
    spec = apps_to_code_exec_spec(load_test_cases(in_outs), limit)
    if "asserts" in spec:  # call-based: the test is appended to the program, success is the exit status
        jobs = [(generation + "\n\n" + suffix, "", None) for suffix in spec["asserts"]]
    else:
        jobs = [(generation, stdin, out) for stdin, out in zip(spec["inputs"], spec["outputs"])]
    if not jobs:
        return [], []

    def run(job: tuple[str, str, str | None]) -> tuple[Any, dict[str, Any]]:
        code, stdin, expected = job
        args = (sandbox_fusion_url, code, stdin, timeout, timeout, memory_limit_mb, language)
        if concurrent_semaphore is not None:
            with concurrent_semaphore:
                reply, error = call_sandbox_api(*args)
        else:
            reply, error = call_sandbox_api(*args)
        return _judge(reply, error, expected)

    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(jobs))) as pool:
        outcomes = list(pool.map(run, jobs))
    results = [r for r, _ in outcomes]
    metadata = [dict(m, case_index=i) for i, (_, m) in enumerate(outcomes)]
    return results, metadata


def compute_score(
    sandbox_fusion_url: str,
    concurrent_semaphore: Any,
    memory_limit_mb: int | None,
    completion: str,
    test_cases: Any,
    continuous: bool = False,
    timeout: int = DEFAULT_TIMEOUT,
) -> tuple[float, list[dict[str, Any]]]:
    """``(score, metadata_list)``: 1.0 when every test passes; else 0.0, or with ``continuous`` the fraction of
    the first 10 tests passed. The program (Python) is the completion's last fenced code block, else the whole
    completion."""
    completion = str(completion)
    code = extract_code(completion)
    if code is None:
        code = completion
    results, metadata = check_correctness(
        sandbox_fusion_url,
        test_cases,
        code,
        timeout=timeout,
        memory_limit_mb=memory_limit_mb,
        concurrent_semaphore=concurrent_semaphore,
    )
    if not results:
        return 0.0, metadata
    if all(r is True for r in results):
        return 1.0, metadata
    if continuous:
        head = results[:CONTINUOUS_MAX_TESTS]
        return sum(r is True for r in head) / len(head), metadata
    return 0.0, metadata
