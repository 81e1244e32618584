"""The invariants the PPO driver checks while a run runs (verl/trainer/ppo/invariants.py): every consumed sample's
policy version (a forged one stops the run with StalenessError, the switch turns it off), and the rollout-vs-trainer
log-prob gap logged every step also when the old-log-prob pass is skipped, with a warning once past the threshold
and again only when it doubles (a rollout whose log-probs are off on purpose)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import DictConfig

from verl.algorithms.rollout_correction import LogProbGapSums, compute_mismatch_metrics
from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.ppo.invariants import POLICY_VERSION, LogProbGapWatch, StalenessError
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.runner import run_ppo

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ch.isdigit()) / max(len(solution_str), 1)
"""


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("invariants_task")
    train, _ = generate_arithmetic_splits(train_size=16, test_size=2, seed=4)
    write_parquet(train, str(root / "train.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "reward": str(root / "reward.py")}


def _config(model: str, task: dict[str, str], out: Path, extra: list[str] = ()) -> DictConfig:
    return load_config(
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={task['train']}",
            f"custom_reward_function.path={task['reward']}",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=4",
            "data.max_prompt_length=128",
            "data.max_response_length=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=false",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            f"trainer.default_local_dir={out}",
            *extra,
        ]
    )


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return [r["metrics"] for r in rows if "actor/pg_loss" in r.get("metrics", {})]


def _tamper(monkeypatch: pytest.MonkeyPatch, version_shift: int = 0, log_prob_shift: float = 0.0) -> None:
    """Rollouts that claim another policy version, or whose engine log-probs are off by ``log_prob_shift``."""
    real = RayPPOTrainer._rollout

    def tampered(self, batch, timing):
        out = real(self, batch, timing)
        if version_shift:
            out.non_tensor_batch[POLICY_VERSION] = (
                np.asarray(out.non_tensor_batch[POLICY_VERSION], dtype=np.int64) + version_shift
            ).astype(object)
        if log_prob_shift:
            out.batch["rollout_log_probs"] = out.batch["rollout_log_probs"] - log_prob_shift * self.global_steps
        return out

    monkeypatch.setattr(RayPPOTrainer, "_rollout", tampered)


# ------------------------------------------------------------------------------------------------ unit tests
def test_gap_sums_equal_the_whole_batch_metrics_whatever_the_split():
    g = torch.Generator().manual_seed(0)
    trainer = -torch.rand(6, 5, generator=g) * 3
    rollout = trainer + 0.1 * torch.randn(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.3).long()
    whole = compute_mismatch_metrics(trainer, rollout, mask)  # its masked mean adds a tiny epsilon
    first = None
    for split in ([6], [1, 5], [2, 2, 2]):
        sums = LogProbGapSums()
        start = 0
        for size in split:
            sums.add(trainer[start : start + size], rollout[start : start + size], mask[start : start + size])
            start += size
        got = sums.metrics()
        first = first or got
        for key in ("kl", "k3_kl", "log_prob_abs_diff_mean", "log_prob_abs_diff_max"):
            assert math.isclose(got[key], whole[key], rel_tol=1e-6), (split, key)
            assert math.isclose(got[key], first[key], rel_tol=1e-12), (split, key)
    assert whole["log_prob_abs_diff_max"] == (trainer - rollout).abs()[mask.bool()].max().item()


def test_gap_watch_warns_once_then_only_when_it_doubles(capsys):
    watch = LogProbGapWatch(0.01)
    gaps = [0.001, 0.02, 0.03, 0.035, 0.05, 0.02, 0.2]
    warned = [watch.observe(step, {"rollout_corr/k3_kl": gap}) for step, gap in enumerate(gaps, 1)]
    assert warned == [False, True, False, False, True, False, True]
    err = capsys.readouterr().err
    assert err.count("[verl] warning:") == 3 and "trainer.log_prob_gap_warn_kl=0.01" in err
    off = LogProbGapWatch(0)
    assert not off.observe(1, {"rollout_corr/k3_kl": 5.0})


# ------------------------------------------------------------------------------------------- tiny PPO runs
def test_versions_and_gap_logged_when_the_old_log_prob_pass_is_skipped(tiny_model_dir, task, tmp_path, capsys):
    """On-policy GRPO (the old-log-prob pass skipped): every step logs staleness 0 and the gap, measured on the
    actor's pre-update forward; hf engine and actor in fp32 on the same weights agree, so no warning."""
    run_ppo(_config(tiny_model_dir, task, tmp_path))
    rows = _metrics(tmp_path)
    assert len(rows) == 2
    for step, m in enumerate(rows, 1):
        assert "timing_s/old_log_prob" not in m
        assert m["training/policy_version"] == step - 1
        assert m["training/policy_staleness/min"] == m["training/policy_staleness/max"] == 0
        assert m["rollout_corr/k3_kl"] < 1e-6 and m["rollout_corr/log_prob_abs_diff_max"] < 1e-3
        assert 0 <= m["rollout_corr/log_prob_abs_diff_mean"] <= m["rollout_corr/log_prob_abs_diff_max"]
        assert math.isfinite(m["rollout_corr/kl"])
    assert "log_prob_gap_warn_kl" not in capsys.readouterr().err


def test_a_forged_policy_version_stops_the_run(tiny_model_dir, task, tmp_path, monkeypatch):
    """A batch that claims to come from the previous policy (a one-step-off batch in a run that says it is
    synchronous) stops the run at the first update."""
    _tamper(monkeypatch, version_shift=-1)
    with pytest.raises(StalenessError, match=r"step 1: 8 of 8 consumed samples .* version -1 .* holds version 0"):
        run_ppo(_config(tiny_model_dir, task, tmp_path / "on"))
    run_ppo(_config(tiny_model_dir, task, tmp_path / "off", ["trainer.check_policy_version=false"]))
    assert "training/policy_version" not in _metrics(tmp_path / "off")[0]


def test_a_rollout_with_other_log_probs_is_warned_once_then_as_it_worsens(
    tiny_model_dir, task, tmp_path, monkeypatch, capsys
):
    """Rollout log-probs off by 0.3 at step 1 and 0.6 at step 2: logged both steps (bypass mode: the rollout's
    log-probs are the old policy, and the gap is still measured), warned at step 1 and again at step 2 (k3 KL
    grew more than twice)."""
    _tamper(monkeypatch, log_prob_shift=0.3)
    extra = [
        "algorithm.rollout_correction.bypass_mode=true",
        "actor_rollout_ref.actor.skip_old_log_prob_on_policy=false",
    ]
    run_ppo(_config(tiny_model_dir, task, tmp_path, extra))
    rows = _metrics(tmp_path)
    assert [round(m["rollout_corr/log_prob_abs_diff_mean"], 4) for m in rows] == [0.3, 0.6]
    err = capsys.readouterr().err
    assert err.count("trainer.log_prob_gap_warn_kl=0.01") == 2 and "step 1:" in err and "step 2:" in err
    run_ppo(_config(tiny_model_dir, task, tmp_path / "off", [*extra, "trainer.log_prob_gap=false"]))
    assert not any(k.startswith("rollout_corr/") for k in _metrics(tmp_path / "off")[0])
    assert "log_prob_gap_warn_kl" not in capsys.readouterr().err
