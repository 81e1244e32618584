"""Every API example runs as a script with ``--tiny`` (tiny random model + byte tokenizer) and reports success."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples" / "api"

# example -> text its last line must contain
EXPECTED = {
    "ppo_step": "reward=",
    "custom_actor": "weights updated in place",
    "device_mesh": "data-parallel size=1",
    "vllm_actor": "",
    "data_provider": "3 batches served from 2 files",
    "save_checkpoint": "weights-only checkpoint",
    "metrics_exporter": "verl_* samples served",
    "security": "trainer.allow_unsafe_operations=False",
    "namespaces": "['rec-rl', 'search-rl']",
    "dataflow": "responses of the last run: (4, 8)",
    "actor": "pad/eos aligned",
    "dpo": "DPO finished",
    "evaluator": "evaluator ran after every step",
    "tensorboard_loop": "1 TensorBoard event file(s)",
    "export": "reloaded weights equal the trained ones: True",
    "kl_controller": "stayed within kl_coef_max",
    "resume": "resumed run matches the uninterrupted one: True",
    "custom_algorithm": "algorithm.adv_estimator=grpo_median",
    "replay_buffer": "6 updates from 3 rollout batches",
    "preference_lora": "LoRA DPO and KTO trained against the adapter-disabled base",
}
# each example is a fresh interpreter (~10 s of imports on a busy CPU): all but a few core ones are marked slow
SLOW = set(EXPECTED) - {"ppo_step", "actor", "vllm_actor", "dataflow"}


def test_every_example_is_listed():
    scripts = {p.stem for p in EXAMPLES_DIR.glob("*.py") if not p.stem.startswith("_")}
    assert scripts == set(EXPECTED)


@pytest.fixture(scope="module")
def example_runs(request: pytest.FixtureRequest, run_ahead, tmp_path_factory):
    """The selected examples, each ``--tiny`` in a fresh interpreter on one torch thread, started ahead two at a
    time (the interpreter's imports are most of an example's time, and CI has two cores)."""
    env = {
        **os.environ,
        "VERL_EXAMPLE_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    commands = {
        name: dict(
            args=[sys.executable, str(EXAMPLES_DIR / f"{name}.py"), "--tiny", "--output-dir",
                  str(tmp_path_factory.mktemp(f"example_{name}"))],
            timeout=300,
            env=env,
            cwd=str(EXAMPLES_DIR.parents[1]),
        )
        for name in run_ahead.selected(request, "name")
    }  # fmt: skip
    runs = run_ahead.start(commands)
    yield runs
    runs.close()


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(EXPECTED)]
)
def test_example_runs_tiny(name, example_runs):
    proc = example_runs.result(name)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    last = proc.stdout.strip().splitlines()[-1]
    assert EXPECTED[name] in last, last
