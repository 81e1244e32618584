"""Code-contest grader (``data_source`` ``codecontests``, ``apps``, ``codeforces``, ``taco``) on the local sandbox.

Same call as verl's ``prime_code.compute_score(completion, test_cases, continuous=False) -> (success, metadata)``;
the programs run in this project's sandboxed subprocess (:func:`verl.sandbox.run_python_sandboxed`, via
:mod:`verl.rewards.code_exec`), never in the trainer process. ``test_cases`` is APPS-format JSON:

- standard input / output: ``{"inputs": ["1 2\\n", ...], "outputs": ["3\\n", ...]}``;
- call-based (LeetCode style): ``{"fn_name": "add", "inputs": [[1, 2], ...], "outputs": [3, ...]}``; each input is
  the list of positional arguments (or JSON lines, one argument per line); ``Solution().<fn_name>`` is called when
  the program defines a ``Solution`` class, else the function ``<fn_name>``. An expected output given as a
  one-element list also matches its element (APPS stores outputs both ways).

The program is the last fenced code block of the completion, or the whole completion when it has none.
``success`` is True when every test passes; with ``continuous=True`` it is the fraction of the first 10 tests
passed (as verl: large test suites are not run in full for a partial score).
"""

from __future__ import annotations

import json
from typing import Any

from verl.rewards import code_exec

__all__ = ["apps_to_code_exec_spec", "compute_score", "ensure_fenced", "load_test_cases"]

CONTINUOUS_MAX_TESTS = 10

_CALL_TEMPLATE = """
import json as _verl_json

def _verl_norm(x):
    if isinstance(x, (list, tuple)):
        return [_verl_norm(v) for v in x]
    if isinstance(x, dict):
        return {{k: _verl_norm(v) for k, v in x.items()}}
    return x

_verl_args = _verl_json.loads({args!r})
_verl_expected = _verl_norm(_verl_json.loads({expected!r}))
_verl_fn = getattr(Solution(), {fn!r}) if "Solution" in globals() else globals()[{fn!r}]
_verl_out = _verl_norm(_verl_fn(*_verl_args))
_verl_ok = _verl_out == _verl_expected or (
    isinstance(_verl_expected, list) and len(_verl_expected) == 1 and _verl_out == _verl_expected[0]
)
assert _verl_ok, "wrong answer: got %r, expected %r" % (_verl_out, _verl_expected)
"""


def load_test_cases(test_cases: Any) -> dict[str, Any]:
    """``test_cases`` (a dict, or its JSON text) as a dict with ``inputs`` and ``outputs`` of equal length."""
    spec = test_cases
    if isinstance(spec, (bytes, bytearray)):
        spec = spec.decode("utf-8")
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise ValueError(f"code test cases: not valid JSON ({e}): {test_cases[:120]!r}") from e
    if not isinstance(spec, dict) or "inputs" not in spec or "outputs" not in spec:
        got = sorted(spec) if isinstance(spec, dict) else type(spec).__name__
        raise ValueError(f"code test cases: expected a dict with 'inputs' and 'outputs', got {got}")
    if len(spec["inputs"]) != len(spec["outputs"]):
        raise ValueError(
            f"code test cases: {len(spec['inputs'])} inputs but {len(spec['outputs'])} outputs; they must pair"
        )
    return spec


def _call_args(raw: Any) -> list[Any]:
    """Positional arguments of one call-based test: a list, or JSON lines (one argument per line)."""
    if isinstance(raw, str):
        return [json.loads(line) for line in raw.splitlines() if line.strip()]
    return list(raw) if isinstance(raw, (list, tuple)) else [raw]


def _expected(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def apps_to_code_exec_spec(spec: dict[str, Any], limit: int | None = None) -> dict[str, Any]:
    """The :mod:`code_exec` test spec of APPS test cases (the first ``limit`` of them when given)."""
    inputs, outputs = list(spec["inputs"]), list(spec["outputs"])
    if limit is not None:
        inputs, outputs = inputs[:limit], outputs[:limit]
    fn_name = spec.get("fn_name")
    if not fn_name:
        return {"inputs": [str(i) for i in inputs], "outputs": [str(o) for o in outputs]}
    asserts = [
        _CALL_TEMPLATE.format(args=json.dumps(_call_args(i)), expected=json.dumps(_expected(o)), fn=str(fn_name))
        for i, o in zip(inputs, outputs)
    ]
    return {"asserts": asserts}


def ensure_fenced(completion: str) -> str:
    """``completion`` itself when it holds a fenced code block, else the whole text wrapped in a python fence."""
    if code_exec.extract_code(completion) is not None:
        return completion
    return f"```python\n{completion}\n```"


def compute_score(
    completion: str,
    test_cases: Any,
    continuous: bool = False,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    **kwargs: Any,
) -> tuple[bool | float, dict[str, Any]]:
    """``(success, metadata)``: see the module docstring. ``metadata`` holds ``passed``, ``total`` and the first
    failure's ``error``."""
    spec = load_test_cases(test_cases)
    n = len(spec["inputs"])
    if n == 0:
        return False, {"passed": 0, "total": 0, "error": "no test cases"}
    program = ensure_fenced(str(completion))
    limit = min(n, CONTINUOUS_MAX_TESTS) if continuous else None
    result = code_exec.compute_score(
        program, apps_to_code_exec_spec(spec, limit), timeout_s=timeout_s, memory_mb=memory_mb
    )
    metadata = {k: result[k] for k in ("passed", "total", "error")}
    if continuous:
        return result["passed"] / result["total"], metadata
    return result["passed"] == result["total"], metadata
