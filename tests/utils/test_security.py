"""Security switches: the policy from the config, refusals with their messages, safe loading, no eval in scorers."""

from __future__ import annotations

import argparse
import ast
import pathlib

import pytest
import torch

from verl.utils import security
from verl.utils.security import (
    SecurityPolicy,
    UnsafeOperationError,
    parse_literal,
    require_unsafe,
    safe_torch_load,
)

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_policy(monkeypatch):
    monkeypatch.setattr(security, "_policy", None)
    monkeypatch.delenv(security.ENV_ALLOW_UNSAFE, raising=False)


def test_policy_defaults_from_the_packaged_config_are_all_off():
    from verl.trainer.config import load_config

    policy = SecurityPolicy.from_config(load_config([]))
    assert policy == SecurityPolicy(False, False, False, ())


def test_policy_reads_overrides_from_full_config_or_trainer_section():
    from verl.trainer.config import load_config

    cfg = load_config(
        [
            "trainer.allow_unsafe_operations=true",
            "trainer.enable_debug_mode=true",
            "trainer.enable_profiling=true",
            "trainer.profile_steps=[2,5]",
        ]
    )
    expected = SecurityPolicy(True, True, True, (2, 5))
    assert SecurityPolicy.from_config(cfg) == expected
    assert SecurityPolicy.from_config(cfg.trainer) == expected
    assert SecurityPolicy.from_config({"allow_unsafe_operations": True}).allow_unsafe_operations is True
    with pytest.raises(ValueError, match="profile_steps"):
        SecurityPolicy.from_config({"profile_steps": ["x"]})


def test_require_unsafe_refusal_names_the_operation_and_the_switch():
    with pytest.raises(UnsafeOperationError) as info:
        require_unsafe("running a shell command from the model")
    msg = str(info.value)
    assert "running a shell command from the model" in msg
    assert "trainer.allow_unsafe_operations=true" in msg
    assert isinstance(info.value, PermissionError)
    require_unsafe("anything", SecurityPolicy(allow_unsafe_operations=True))  # allowed: no error


def test_installed_policy_is_published_to_child_processes_via_the_environment(monkeypatch):
    import os

    security.set_security_policy(SecurityPolicy(allow_unsafe_operations=True))
    assert os.environ[security.ENV_ALLOW_UNSAFE] == "1"
    require_unsafe("x")
    monkeypatch.setattr(security, "_policy", None)  # a fresh worker process sees only the environment
    assert security.get_security_policy().allow_unsafe_operations is True
    security.set_security_policy(SecurityPolicy())
    with pytest.raises(UnsafeOperationError):
        require_unsafe("x")


def test_safe_torch_load_reads_tensors(tmp_path):
    path = tmp_path / "ok.pt"
    torch.save({"w": torch.arange(3.0), "step": 4, "names": ["a"]}, path)
    state = safe_torch_load(str(path))
    assert torch.equal(state["w"], torch.tensor([0.0, 1.0, 2.0]))
    assert state["step"] == 4 and state["names"] == ["a"]


def test_safe_torch_load_refuses_arbitrary_objects_and_names_the_file(tmp_path):
    path = tmp_path / "pickled.pt"
    torch.save({"obj": argparse.Namespace(a=1)}, path)
    with pytest.raises(UnsafeOperationError) as info:
        safe_torch_load(str(path))
    assert str(path) in str(info.value)
    assert "trainer.allow_unsafe_operations=true" in str(info.value)
    # asking for unrestricted unpickling is itself the refused operation
    with pytest.raises(UnsafeOperationError, match="weights_only=False"):
        safe_torch_load(str(path), weights_only=False)
    # and it is allowed only under the switch
    loaded = safe_torch_load(str(path), weights_only=False, policy=SecurityPolicy(allow_unsafe_operations=True))
    assert loaded["obj"].a == 1


def test_safe_torch_load_missing_or_corrupt_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        safe_torch_load(str(tmp_path / "nope.pt"))
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="bad.pt"):
        safe_torch_load(str(bad))


def test_parse_literal_reads_literals_and_refuses_code():
    assert parse_literal(" [1, -2.5, 'x', (3,), {'a': None}] ") == [1, -2.5, "x", (3,), {"a": None}]
    for code in ("__import__('os').system('true')", "open('f')", "1 + x", "lambda: 0"):
        with pytest.raises(ValueError, match="not a Python literal"):
            parse_literal(code)


def _eval_exec_calls(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec")
    ]


def test_answer_parsing_never_calls_eval_or_exec():
    """Rule scorers and the evaluation code parse answers without eval/exec; the only exec is the gated
    in-process runner of code_exec (reachable only through require_unsafe)."""
    files = sorted((REPO / "verl" / "rewards").glob("*.py"))
    files += [REPO / "verl" / "trainer" / "main_eval.py", REPO / "verl" / "api" / "evaluation.py"]
    found = {f.name: calls for f in files if (calls := _eval_exec_calls(f))}
    assert found == {"code_exec.py": ["exec"]}
    source = (REPO / "verl" / "rewards" / "code_exec.py").read_text(encoding="utf-8")
    assert source.index("require_unsafe(") < source.index("= _run_in_process(program")
