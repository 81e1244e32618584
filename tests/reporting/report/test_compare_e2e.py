"""``verl compare`` of two real tiny GRPO runs (one step each, through ``main_ppo``) that differ in their learning
rate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.reporting.report.compare import build_comparison
from verl.trainer import main_ppo


def _overrides(model_dir: str, root: Path, out: Path, lr: str) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={root / 'train.parquet'}",
        f"data.val_files={root / 'test.parquet'}",
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        f"actor_rollout_ref.actor.optim.lr={lr}",
        "trainer.total_training_steps=1",
        "trainer.log_val_generations=2",
        "trainer.save_freq=-1",
        "trainer.plot=false",
        "trainer.logger=[file]",
        "trainer.torch_threads=1",
        f"trainer.default_local_dir={out}",
    ]


@pytest.mark.slow
def test_two_tiny_grpo_runs_compared(tiny_model_dir: str, tmp_path: Path) -> None:
    train, test = generate_arithmetic_splits(train_size=4, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    runs = [tmp_path / "lr_small", tmp_path / "lr_large"]
    for run, lr in zip(runs, ("1e-6", "1e-3")):
        assert main_ppo.main(_overrides(tiny_model_dir, tmp_path, run, lr)) == 0

    comparison, page = build_comparison([str(r) for r in runs])
    assert comparison.problems == []
    keys = [row.key for row in comparison.config_diff]
    assert "actor_rollout_ref.actor.optim.lr" in keys and "trainer.default_local_dir" in keys
    assert "data.train_batch_size" not in keys  # the same in both: not listed
    assert [r.status for r in comparison.runs] == ["finished", "finished"]
    # the same two validation prompts, each run's generation next to the other's
    assert len(comparison.generations) == 2 and comparison.runs_without_generations == []
    assert all(all(found is not None for found in pair.per_run) for pair in comparison.generations)
    titles = {p.title for p in comparison.panels}
    assert {"Training reward", "Validation (held-out)", "Entropy", "Response length", "Throughput"} <= titles
    for svg in re.findall(r'<figure class="chart"[^>]*>(.*?)</figure>', page, re.S):
        assert {r for r, _ in re.findall(r'id="c\d+-curve-r(\d)-k(\d)"', svg)} == {"0", "1"}
    assert "phase gen: mean s" in page and "update_actor" in page
