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


def _run(script: str, args: list[str], data: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable, DATA=data, PYTHONPATH=ROOT)
    return subprocess.run(["bash", script, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_there_is_a_script_per_algorithm() -> None:
    names = {os.path.basename(os.path.dirname(s)) for s in SCRIPTS}
    for trainer in ("grpo", "ppo", "rloo", "reinforce_plus_plus", "remax", "dapo", "sft", "dpo", "kto", "gkd"):
        assert f"{trainer}_trainer" in names


@pytest.mark.parametrize("script", SCRIPTS, ids=[os.path.basename(s) for s in SCRIPTS])
def test_script_config_is_valid(script: str, offline_data: str) -> None:
    result = _run(script, ["--cfg", "job"], offline_data)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "trainer:" in result.stdout


@pytest.mark.parametrize("kind", ["sft", "dpo", "kto", "gkd"])
def test_offline_script_trains_one_step(kind: str, offline_data: str, tiny_model_dir: str, tmp_path) -> None:
    script = os.path.join(ROOT, "examples", f"{kind}_trainer", f"run_arithmetic_{kind}.sh")
    args = [
        f"model.path={tiny_model_dir}",
        "trainer.total_epochs=1",
        f"trainer.default_local_dir={tmp_path}/out",
        "trainer.logger=[file]",
    ]
    if kind == "gkd":  # the tiny model is its own teacher (same tokenizer); short on-policy samples
        args += [f"teacher.path={tiny_model_dir}", "gkd.max_new_tokens=4"]
    result = _run(script, args, offline_data)
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.exists(os.path.join(tmp_path, "out", "hf_model", "config.json"))
