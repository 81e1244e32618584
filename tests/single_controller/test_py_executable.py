"""``ray_kwargs.ray_init.runtime_env.py_executable`` that could start no worker is refused before Ray starts.

Upstream v0.9's launch scripts set it to ``uv -v run --frozen --all-packages --extra vllm --extra fsdp`` unless
``VERL_USE_UV=0``; without uv, or without a uv.lock, Ray retries the workers for minutes before failing."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from verl.single_controller.ray.cluster import py_executable_problem, start_or_join_ray
from verl.utils.errors import ConfigError

UPSTREAM = "uv -v run --frozen --all-packages --extra vllm --extra fsdp"


def _fake_uv(bin_dir) -> None:
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text("#!/bin/sh\nexit 0\n")
    uv.chmod(uv.stat().st_mode | stat.S_IEXEC)


def test_a_missing_program_or_lock_file_is_named(tmp_path, monkeypatch) -> None:
    assert py_executable_problem(None) is None and py_executable_problem("") is None
    assert py_executable_problem(f"{sys.executable} -X faulthandler") is None  # a program that exists, not uv
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    problem = py_executable_problem(UPSTREAM)
    assert problem.startswith(f"ray_kwargs.ray_init.runtime_env.py_executable={UPSTREAM!r}: 'uv' is not on PATH")
    assert "VERL_USE_UV=0" in problem and "py_executable=null" in problem
    _fake_uv(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    project = tmp_path / "project" / "outputs" / "run"
    project.mkdir(parents=True)
    problem = py_executable_problem(UPSTREAM, cwd=str(project))
    assert "`uv run --frozen` needs a uv.lock" in problem and str(project) in problem
    (tmp_path / "project" / "uv.lock").write_text("")
    assert py_executable_problem(UPSTREAM, cwd=str(project)) is None  # found above, as uv finds it
    assert py_executable_problem("uv run python", cwd=str(tmp_path)) is None  # not frozen: uv makes the lock


def test_a_local_ray_is_not_started_with_it(tmp_path, monkeypatch) -> None:
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])

    def no_init(**kwargs):
        raise AssertionError("ray.init ran")

    monkeypatch.setattr(ray, "init", no_init)
    with pytest.raises(ConfigError, match="'no-such-uv' is not on PATH"):
        start_or_join_ray(runtime_env={"py_executable": "no-such-uv run --frozen python"})
