"""What one step consumes, computed from the config (verl/trainer/config/step_plan.py)."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout

import yaml

from verl.trainer.config import load_config
from verl.trainer.config.log_prob_passes import runs_old_log_prob_pass
from verl.trainer.config.step_plan import PLAN_FILE, format_plan, step_plan, write_plan


def _rows(overrides: list[str]) -> dict[str, object]:
    return {row.what: row.value for row in step_plan(load_config(overrides))}


def test_figures_follow_the_batch_keys_on_several_ranks() -> None:
    rows = _rows(
        [
            "data.train_batch_size=64",
            "data.max_prompt_length=100",
            "data.max_response_length=28",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=16",
            "actor_rollout_ref.actor.ppo_epochs=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "trainer.n_gpus_per_node=4",
            "trainer.device=cpu",
        ]
    )
    assert rows["prompts per step"] == 64
    assert rows["responses per step"] == 256  # 64 * 4
    assert rows["tokens per step (upper bound)"] == 256 * 128
    assert rows["ranks (data-parallel)"] == "4 (2)"  # 4 ranks in Ulysses groups of 2
    assert rows["old log-prob pass: micro-batches per rank"] == 16  # 256 / 2 data-parallel ranks / 8
    assert rows["actor update: optimizer steps per step"] == 8  # 64 / 16 mini-batches * 2 epochs
    assert rows["actor update: sequences per rank per mini-batch"] == 32  # 16 * 4 / 2
    assert rows["actor update: micro-batches per rank per mini-batch"] == 8  # 32 / 4
    assert rows["actor update: gradient accumulation"] == 8
    assert "critic update: optimizer steps per step" not in rows  # GRPO: no critic
    assert "reference log-prob pass: micro-batches per rank" not in rows  # no KL term


def test_each_figure_says_which_keys_made_it() -> None:
    plan = step_plan(load_config(["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]))
    text = format_plan(plan)
    steps = next(r for r in plan if r.what == "actor update: optimizer steps per step")
    assert steps.value == 4
    assert "actor_rollout_ref.actor.ppo_mini_batch_size" in steps.how and "(16 / 4) * 1" in steps.how
    assert text.splitlines()[0] == "one step of this run:" and len(text.splitlines()) == len(plan) + 1


def test_dynamic_batches_give_a_token_bound_and_reference_and_critic_show_up() -> None:
    rows = _rows(
        [
            "algorithm.adv_estimator=gae",
            "data.train_batch_size=32",
            "data.max_prompt_length=96",
            "data.max_response_length=32",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1000",
            "actor_rollout_ref.actor.use_kl_loss=true",
        ]
    )
    # 8 * 2 = 16 sequences of at most 128 tokens in budgets of 1000 tokens: at least ceil(2048 / 1000) = 3
    assert rows["actor update: micro-batches per rank per mini-batch"] == ">= 3 (by tokens)"
    assert "actor update: gradient accumulation" not in rows
    assert rows["reference log-prob pass: micro-batches per rank"] == 2  # 64 / 32
    assert rows["critic update: optimizer steps per step"] == 32 // int(
        load_config(["algorithm.adv_estimator=gae", "data.train_batch_size=32"]).critic.ppo_mini_batch_size
    )
    assert rows["old log-prob pass: micro-batches per rank"] == 2  # 4 mini-batches: not on-policy


def test_the_plan_and_the_driver_agree_on_the_old_log_prob_pass() -> None:
    on_policy = load_config([])  # the demo: one mini-batch, one epoch
    assert not runs_old_log_prob_pass(on_policy)
    assert _rows([])["old log-prob pass"] == "skipped"
    logprobs = "actor_rollout_ref.rollout.calculate_log_probs=true"
    corrected = [logprobs, "algorithm.rollout_correction.rollout_is=token"]
    assert runs_old_log_prob_pass(load_config(corrected))  # the correction compares old with rollout log-probs
    assert "old log-prob pass: micro-batches per rank" in _rows(corrected)
    bypass = [logprobs, "algorithm.rollout_correction.bypass_mode=true", "actor_rollout_ref.actor.ppo_epochs=2"]
    assert not runs_old_log_prob_pass(load_config(bypass))
    assert _rows(bypass)["old log-prob pass"] == "skipped"


def test_cfg_job_prints_the_plan_on_stderr_and_only_yaml_on_stdout() -> None:
    from verl.trainer.main_ppo import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["--cfg", "job", "data.train_batch_size=16"]) == 0
    assert "one step of this run:" in err.getvalue() and "prompts per step" in err.getvalue()
    assert yaml.safe_load(out.getvalue())["data"]["train_batch_size"] == 16


def test_write_plan_is_json_in_the_run_dir(tmp_path) -> None:
    path = write_plan(step_plan(load_config([])), str(tmp_path))
    assert path == os.path.join(str(tmp_path), PLAN_FILE)
    rows = json.load(open(path))
    assert rows[0] == {"what": "prompts per step", "value": 8, "how": "data.train_batch_size"}
