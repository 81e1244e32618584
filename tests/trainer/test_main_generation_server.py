"""Upstream's rollout-only generation entry point is refused in one line that names what to use instead."""

from __future__ import annotations

import pytest

from verl.trainer import main_generation_server


def test_refused_in_one_line_naming_main_eval(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_generation_server.main(["actor_rollout_ref.rollout.name=vllm", "+data.output_path=/tmp/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not implemented here" in err[0]
    assert "python -m verl.trainer.main_eval" in err[0] and "output.generations_path" in err[0]
