"""Every launch script under examples/*_trainer/ resolves to a valid config, and the offline ones train a step.

The scripts pass extra ``key=value`` arguments through, so ``--cfg job`` checks their overrides against the
schema without training; the SFT/DPO/KTO/GKD scripts also run one step on data from
``examples/data_preprocess/arithmetic_offline.py`` with a tiny model.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "examples", "*_trainer", "*.sh")))


@pytest.fixture(scope="module")
def offline_data(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("arithmetic_offline"))
    script = os.path.join(ROOT, "examples", "data_preprocess", "arithmetic_offline.py")
    subprocess.run(
        [sys.executable, script, "--local_dir", out, "--train_size", "8", "--test_size", "4"], check=True, cwd=ROOT
    )
    return out


def _command(script: str, args: list[str], data: str) -> dict:
    """``subprocess.run`` keyword arguments running ``script`` with ``args`` on ``data``."""
    # one torch thread: two of these run side by side on CI's 2 cores, and two threads each would oversubscribe them
    env = dict(os.environ, PYTHON=sys.executable, DATA=data, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    return dict(args=["bash", script, *args], env=env, cwd=ROOT, timeout=600)


OFFLINE_KINDS = ["sft", "dpo", "kto", "gkd"]


def _offline_args(kind: str, model_dir: str, out: str) -> list[str]:
    """The overrides that make ``run_arithmetic_<kind>.sh`` train one step of the tiny model into ``out``."""
    args = [
        f"model.path={model_dir}",
        "trainer.total_epochs=1",
        f"trainer.default_local_dir={out}",
        "trainer.logger=[file]",
    ]
    if kind == "gkd":  # the tiny model is its own teacher (same tokenizer); short on-policy samples
        args += [f"teacher.path={model_dir}", "gkd.max_new_tokens=4"]
    return args


@pytest.fixture(scope="module")
def script_runs(request: pytest.FixtureRequest, run_ahead, offline_data: str, tiny_model_dir: str, tmp_path_factory):
    """Every child process this module's selected tests check, started ahead, two at a time (a fresh interpreter
    each: the slow part here): the one-step trainings first (the longest), keyed by kind, then each script with
    ``--cfg job``, keyed by script; ``outs`` maps a kind to its output directory."""
    commands, outs = {}, {}
    for kind in run_ahead.selected(request, "kind"):
        script = os.path.join(ROOT, "examples", f"{kind}_trainer", f"run_arithmetic_{kind}.sh")
        outs[kind] = str(tmp_path_factory.mktemp(f"offline_{kind}") / "out")
        commands[kind] = _command(script, _offline_args(kind, tiny_model_dir, outs[kind]), offline_data)
    for script in run_ahead.selected(request, "script"):
        commands[script] = _command(script, ["--cfg", "job"], offline_data)
    runs = run_ahead.start(commands)
    runs.outs = outs
    yield runs
    runs.close()


def test_there_is_a_script_per_algorithm() -> None:
    names = {os.path.basename(os.path.dirname(s)) for s in SCRIPTS}
    for trainer in ("grpo", "ppo", "rloo", "reinforce_plus_plus", "remax", "dapo", "sft", "dpo", "kto", "gkd"):
        assert f"{trainer}_trainer" in names


@pytest.mark.parametrize("script", SCRIPTS, ids=[os.path.basename(s) for s in SCRIPTS])
def test_script_config_is_valid(script: str, script_runs) -> None:
    result = script_runs.result(script)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "trainer:" in result.stdout


@pytest.mark.parametrize("kind", OFFLINE_KINDS)
def test_offline_script_trains_one_step(kind: str, script_runs) -> None:
    result = script_runs.result(kind)
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.exists(os.path.join(script_runs.outs[kind], "hf_model", "config.json"))
