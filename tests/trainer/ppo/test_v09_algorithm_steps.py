"""One training step on the tiny model with each upstream-v0.9 algorithm wired through driver and actor: the
optimal token baseline (the actor returns sum_pi_squared), GDPO (reward components from the reward function's dict),
bypass-mode REINFORCE with sequence weights (upstream's rollout_correction example), DPPO-TV with token-sum, and
verl-recipe's GVPO, SPPO, SPIN's online DPO and FlowRL (its export without the log Z head)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.ppo.runner import run_ppo

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    hits = sum(1 for ch in solution_str if ord(ch) < 128)
    short = 1.0 if len(solution_str) <= 1 else 0.0
    return {"score": hits + short, "hits": float(hits), "short": short}
"""

pytestmark = pytest.mark.slow  # ~10 s a step on two cores

RC = "algorithm.rollout_correction"
A = "actor_rollout_ref.actor"
MODES = {
    "otb": ["algorithm.adv_estimator=optimal_token_baseline", f"{A}.calculate_sum_pi_squared=true"],
    "gdpo": ["algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[hits,short]"],
    "bypass_reinforce": [
        "algorithm.adv_estimator=rloo",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        f"{RC}.bypass_mode=true",
        f"{RC}.loss_type=reinforce",
        f"{RC}.rollout_is=sequence",
        f"{RC}.rollout_is_batch_normalize=true",
    ],
    "dppo_tv_token_sum": [
        "algorithm.adv_estimator=grpo",
        f"{A}.policy_loss.loss_mode=dppo_tv",
        f"{A}.loss_agg_mode=token-sum",
        f"{A}.clip_ratio=0.15",
    ],
    # verl-recipe's GVPO: its loss mode and beta, GRPO advantages without the std
    "gvpo": [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=false",
        f"{A}.policy_loss.loss_mode=gvpo",
        f"{A}.gvpo_beta=0.1",
    ],
    # verl-recipe's SPPO: the soft-mean estimator and the squared log-ratio loss
    "sppo": ["algorithm.adv_estimator=sppo", f"{A}.policy_loss.loss_mode=sppo", "algorithm.sppo_eta=1.0"],
    # verl-recipe's SPIN: DPO on each prompt's ranked pair against a reference refreshed every step
    "online_dpo": [
        "algorithm.adv_estimator=grpo",
        f"{A}.policy_loss.loss_mode=online_dpo",
        f"{A}.dpo_beta=0.1",
        "trainer.ref_update_freq=1",
    ],
    # verl-recipe's FlowRL: the trajectory-balance loss against the reference, KL term at 0 as its script; exported
    "flowrl": [
        "algorithm.adv_estimator=grpo",
        f"{A}.policy_loss.loss_mode=flowrl",
        f"{A}.use_kl_loss=true",
        f"{A}.kl_loss_coef=0.0",
        "trainer.export_hf=true",
    ],
}


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("v09_task")
    train, test = generate_arithmetic_splits(train_size=8, test_size=2, seed=3)
    write_parquet(train, str(root / "train.parquet"))
    write_parquet(test, str(root / "test.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "val": str(root / "test.parquet"), "reward": str(root / "reward.py")}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_one_step(tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path, mode: str) -> None:
    overrides = [
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        f"data.train_files={task_files['train']}",
        f"data.val_files={task_files['val']}",
        f"custom_reward_function.path={task_files['reward']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=128",
        "data.max_response_length=3",
        "actor_rollout_ref.rollout.n=2",
        f"{A}.ppo_mini_batch_size=4",
        f"{A}.ppo_micro_batch_size_per_gpu=4",
        f"{A}.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=0",
        "trainer.logger=[file]",
        "trainer.export_hf=false",
        "trainer.plot=false",
        f"trainer.default_local_dir={tmp_path}",
    ]
    run_ppo(load_config(overrides + MODES[mode]))
    lines = (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()
    (record,) = [r["metrics"] for r in map(json.loads, lines) if "actor/pg_loss" in r.get("metrics", {})]
    assert math.isfinite(record["actor/pg_loss"])
    if mode == "gvpo":  # the residual of the regression GVPO runs (0 only at its optimum)
        assert record["actor/gvpo_residual_rms"] > 0
    if mode == "sppo":  # the recipe's metrics
        assert math.isfinite(record["actor/log_ratio_mean"]) and math.isfinite(record["actor/preference_mean"])
    if mode == "online_dpo":  # the reference was computed (and refreshed) for the DPO margin
        assert "timing_s/ref" in record and 0.0 <= record["actor/dpo_tied_frac"] <= 1.0
    if mode == "flowrl":  # the log Z head learned beside the policy and stayed out of the export
        assert "timing_s/ref" in record and math.isfinite(record["actor/log_z"])
        from transformers import AutoModelForCausalLM

        exported = next(tmp_path.rglob("hf_model/config.json")).parent
        _, info = AutoModelForCausalLM.from_pretrained(str(exported), output_loading_info=True)
        assert not info["unexpected_keys"] and not info["missing_keys"]
    if mode == "otb":  # the baseline needs the old-log-prob pass (it carries sum_pi_squared)
        assert "timing_s/old_log_prob" in record
    if mode == "bypass_reinforce":  # no old-log-prob pass; the weights are computed in the actor's loss
        assert "timing_s/old_log_prob" not in record
        assert math.isfinite(record["rollout_corr/rollout_is_mean"])
        assert record["rollout_corr/rollout_is_batch_norm_factor"] > 0
