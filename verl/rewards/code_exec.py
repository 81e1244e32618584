"""Reward for code tasks: run the response's Python against test cases; score = fraction of tests passed.

The code always runs in the sandboxed subprocess of :mod:`verl.sandbox` (time, memory and network limits).
Running it inside the trainer process (``sandbox=False``) is an unsafe operation refused unless
``trainer.allow_unsafe_operations=true``.

Test cases (``ground_truth``, a dict or its JSON text - parsed with ``json``, never ``eval``):

- standard input / output: ``{"inputs": ["1 2\\n", ...], "outputs": ["3\\n", ...]}``; a test passes when the
  program exits with status 0 and its stdout equals the expected output up to trailing whitespace per line;
- assertions: ``{"asserts": ["assert add(1, 2) == 3", ...]}`` (or one ``"test_code"`` string); each is appended to
  the program and passes when the program exits with status 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import dataclass
from typing import Any

from verl.sandbox import run_python_sandboxed
from verl.utils.security import SecurityPolicy, require_unsafe

__all__ = ["CodeTest", "compute_score", "extract_code", "parse_test_cases", "reward_function"]

_FENCE_RE = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(solution_str: str) -> str | None:
    """The last fenced code block of ``solution_str`` (a ```python block wins over an untagged one), or None."""
    blocks = _FENCE_RE.findall(solution_str or "")
    if not blocks:
        return None
    tagged = [body for tag, body in blocks if tag]
    return (tagged or [body for _, body in blocks])[-1]


@dataclass(frozen=True)
class CodeTest:
    """One test: run ``code_suffix`` after the program with ``stdin``; compare stdout with ``expected_stdout``
    (None: only the exit status counts)."""

    stdin: str = ""
    expected_stdout: str | None = None
    code_suffix: str = ""


def parse_test_cases(ground_truth: Any) -> list[CodeTest]:
    """Turn ``ground_truth`` (dict or JSON text, see the module docstring) into a list of :class:`CodeTest`.

    Raises ValueError naming what is wrong (bad JSON, mismatched inputs/outputs, no tests).
    """
    spec = ground_truth
    if isinstance(spec, (bytes, bytearray)):
        spec = spec.decode("utf-8")
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise ValueError(f"code test cases: ground_truth is not valid JSON ({e}): {ground_truth[:120]!r}") from e
    if not isinstance(spec, dict):
        raise ValueError(f"code test cases: expected a dict, got {type(spec).__name__}")
    tests: list[CodeTest] = []
    if "inputs" in spec or "outputs" in spec:
        inputs, outputs = list(spec.get("inputs") or []), list(spec.get("outputs") or [])
        if len(inputs) != len(outputs):
            raise ValueError(
                f"code test cases: {len(inputs)} inputs but {len(outputs)} outputs; they must pair one to one"
            )
        tests += [CodeTest(stdin=str(i), expected_stdout=str(o)) for i, o in zip(inputs, outputs)]
    asserts = spec.get("asserts")
    if asserts:
        tests += [CodeTest(code_suffix=str(a)) for a in asserts]
    if spec.get("test_code"):
        tests.append(CodeTest(code_suffix=str(spec["test_code"])))
    if not tests:
        raise ValueError(f"code test cases: no 'inputs'/'outputs', 'asserts' or 'test_code' in keys {sorted(spec)}")
    return tests


def _same_output(actual: str, expected: str) -> bool:
    def norm(text: str) -> list[str]:
        return [line.rstrip() for line in text.strip().splitlines()]

    return norm(actual) == norm(expected)


def _run_in_process(program: str, stdin: str) -> tuple[bool, str]:
    """Execute ``program`` in this process (only reachable with unsafe operations allowed)."""
    out = io.StringIO()
    fake_stdin = io.StringIO(stdin)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    with contextlib.redirect_stdout(out), _swap_stdin(fake_stdin):
        try:
            exec(compile(program, "<model-code>", "exec"), namespace)  # noqa: S102 - gated by require_unsafe
        except BaseException:  # noqa: BLE001 - any failure of the program is a failed test
            return False, out.getvalue()
    return True, out.getvalue()


@contextlib.contextmanager
def _swap_stdin(stream: io.StringIO):
    import sys

    saved = sys.stdin
    sys.stdin = stream
    try:
        yield
    finally:
        sys.stdin = saved


def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    sandbox: bool = True,
    policy: SecurityPolicy | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score a code answer: ``{"score": passed / total, "passed", "total", "error"}``.

    ``score`` is 0 when the response has no fenced code block. Each test runs in its own sandboxed subprocess
    limited to ``timeout_s`` seconds and ``memory_mb`` MiB, without network. ``sandbox=False`` (in-process
    execution) raises :class:`verl.utils.security.UnsafeOperationError` unless unsafe operations are allowed.
    Extra ``kwargs`` of the reward-function contract are accepted and ignored.
    """
    if not sandbox:
        require_unsafe("executing model-generated code in the trainer process (code_exec sandbox=False)", policy)
    tests = parse_test_cases(ground_truth)
    code = extract_code(solution_str)
    if code is None:
        return {"score": 0.0, "passed": 0, "total": len(tests), "error": "no fenced code block in the response"}
    passed, first_error = 0, ""
    for test in tests:
        program = code if not test.code_suffix else f"{code}\n\n{test.code_suffix}\n"
        if sandbox:
            result = run_python_sandboxed(program, stdin=test.stdin, timeout_s=timeout_s, memory_mb=memory_mb)
            ok, stdout = result.ok, result.stdout
            error = "" if ok else result.describe()
        else:
            ok, stdout = _run_in_process(program, test.stdin)
            error = "" if ok else "the program raised"
        if ok and test.expected_stdout is not None and not _same_output(stdout, test.expected_stdout):
            ok, error = False, "wrong output"
        passed += int(ok)
        if not ok and not first_error:
            first_error = error
    return {"score": passed / len(tests), "passed": passed, "total": len(tests), "error": first_error}


def reward_function(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """:func:`compute_score` with verl's reward-function contract, for
    ``custom_reward_function.path=<this file> custom_reward_function.name=reward_function``; ``reward_kwargs``
    (``timeout_s``, ``memory_mb``) pass through."""
    return compute_score(solution_str, ground_truth, extra_info, **kwargs)
