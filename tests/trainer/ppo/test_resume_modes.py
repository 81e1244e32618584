"""Kill -9 and resume in every trainer mode (issue 34, item 4): a child process runs PPO and SIGKILLs itself at a
chosen point of a step (verl/trainer/ppo/kill_resume.py), the same command resumes it in this process, and the end
is compared with an uninterrupted run of the same config.

- synchronous, synchronous multi-turn agent loops, synchronous LoRA, online DPO with a refreshed reference, FlowRL
  (its log Z head), fully asynchronous at staleness 0: the final weights and optimizer state are bit-identical, and
  so is the consumed data order;
- one-step-off and fully asynchronous at staleness 1: the consumed data order is identical (no prompt lost or
  repeated); the batch that was in flight at the kill is generated again, from the same prompts with the same seed,
  by the resumed weights, so it is fresher than in the uninterrupted run (staleness 0 instead of 1) and the final
  weights differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.ppo.kill_resume import final_state, run_killed, tiny_run_overrides
from verl.trainer.ppo.runner import run_ppo

# digits score; the characters' codes break most ties, so a group's responses rank (online DPO forms its pairs); in
# [0, 1) for SPO's success tracker
REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    digits = sum(1 for ch in solution_str if ch.isdigit()) / max(len(solution_str), 1)
    return 0.9 * digits + 1e-3 * (sum(map(ord, solution_str)) % 97)
"""
STEPS = 4


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("resume_modes_task")
    train, _ = generate_arithmetic_splits(train_size=16, test_size=2, seed=3)
    write_parquet(train, str(root / "train.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "reward": str(root / "reward.py")}


def _overrides(model: str, task: dict[str, str], out: Path, mode: str) -> list[str]:
    return tiny_run_overrides(model, task["train"], task["reward"], str(out), mode, STEPS, save_freq=1)


def _staleness(out: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {int(r["step"]): r["metrics"]["async/staleness/max"] for r in rows if "async/staleness/max" in r["metrics"]}


def _kill_and_resume(model: str, task: dict[str, str], tmp_path: Path, mode: str, step: int, point: str, full=True):
    full_out, cut_out = tmp_path / "full", tmp_path / "cut"
    if full:
        run_ppo(load_config(_overrides(model, task, full_out, mode)))
    # forked: this process's imports are done, so the child starts in a second (a fresh interpreter: tens of seconds
    # on a loaded machine); an asynchronous trainer earlier in this process leaves weight-transfer threads behind,
    # which a fork does not survive: those modes start a fresh interpreter
    fork = not mode.startswith(("fully_async", "one_step_off"))
    code = run_killed(_overrides(model, task, cut_out, mode), step=step, point=point, timeout_s=600, fork=fork)
    assert code == -9, f"the child was not killed (exit code {code})"
    # the kill left the checkpoint of the step before behind (killed mid-save: and a temporary directory), or, killed
    # after the step, that step's
    assert final_state(str(cut_out))["step"] == (step if point == "after" else step - 1)
    run_ppo(load_config(_overrides(model, task, cut_out, mode)))
    # every step logged once: none repeated by the resume, none counted twice (verl #7933)
    logged = [json.loads(line)["step"] for line in (cut_out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(1, STEPS + 1))
    return (final_state(str(full_out)) if full else None), final_state(str(cut_out)), cut_out


def _uninterrupted_order(model: str, task: dict[str, str], tmp_path: Path) -> list[int]:
    """The prompt indices an uninterrupted run consumes: the first STEPS batches of its seeded sampler's order."""
    import pandas as pd

    from verl.data.sampler import ResumableSampler

    cfg = load_config(_overrides(model, task, tmp_path / "unused", "sync"))
    rows = len(pd.read_parquet(task["train"]))
    order = ResumableSampler(range(rows), shuffle=bool(cfg.data.shuffle), seed=int(cfg.data.seed)).indices(0)
    return order[: STEPS * int(cfg.data.train_batch_size)]


# the asynchronous modes start a fresh interpreter for the killed run, and a rollouter process per run: 15-20 s
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    ("mode", "point"),
    [
        ("sync", "update"),
        ("lora", "rollout"),
        ("online_dpo_ref2", "update"),
        ("flowrl", "update"),
        pytest.param("fully_async_s0", "rollout", marks=SLOW),
    ],
)
def test_deterministic_modes_resume_bit_exactly(tiny_model_dir, task, tmp_path, mode, point):
    full, resumed, cut_out = _kill_and_resume(tiny_model_dir, task, tmp_path, mode, step=3, point=point)
    assert resumed["step"] == full["step"] == STEPS
    assert resumed["indices"] == full["indices"]  # the same prompts in the same order, none lost or repeated
    assert full["indices"] == _uninterrupted_order(tiny_model_dir, task, tmp_path)
    assert resumed["digest"] == full["digest"]  # weights and optimizer state bit for bit
    assert not list(cut_out.glob(".tmp-*"))  # a save cut short by the kill was cleaned up


def test_spo_resumes_bit_exactly_with_its_prompt_values(tiny_model_dir, task, tmp_path):
    """The tracker and each prompt's last response are in ``data.pt``: the resumed run draws the prompts the
    uninterrupted one drew and ends with the same values and weights. Each step reads 4 prompts and trains 2."""
    from verl.checkpoint.checkpoint_manager import safe_torch_load
    from verl.checkpoint.layout import newest_complete_step_dir

    full, resumed, cut_out = _kill_and_resume(tiny_model_dir, task, tmp_path, "spo", step=3, point="update")
    assert resumed["indices"] == full["indices"] and len(full["indices"]) == 4 * STEPS
    assert resumed["digest"] == full["digest"]
    states = [
        safe_torch_load(f"{newest_complete_step_dir(str(out))}/data.pt", "driver state")["spo"]
        for out in (tmp_path / "full", cut_out)
    ]
    assert states[0]["tracker"] == states[1]["tracker"] and sum(states[0]["tracker"]["visits"]) == 2 * STEPS
    for key in ("past_prompt_ids", "past_response_ids", "past_log_probs"):
        assert torch.equal(states[0][key], states[1][key]), key
    rows = [json.loads(line) for line in (cut_out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert all("spo/rho_clipped" in r["metrics"] and "spo/adv_after_norm/p50" in r["metrics"] for r in rows)


def test_sync_partial_rollouts_resume_bit_exactly(tiny_model_dir, task, tmp_path):
    """The pool's unfinished responses are in the checkpoint: the resumed run continues them as the uninterrupted
    one did. Its first step draws two batches, its last none."""
    full, resumed, _ = _kill_and_resume(tiny_model_dir, task, tmp_path, "partial_rollout", step=3, point="update")
    assert resumed["indices"] == full["indices"]
    order = _uninterrupted_order(tiny_model_dir, task, tmp_path)  # STEPS batches
    assert len(full["indices"]) == len(order) + len(order) // STEPS and full["indices"][: len(order)] == order
    assert resumed["digest"] == full["digest"]
    rows = [json.loads(line) for line in (tmp_path / "full" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["metrics"]["partial_rollout/resumed_rows"] for r in rows) > 0  # responses did continue


def test_agent_loop_runs_resume_the_same_data_order(tiny_model_dir, task, tmp_path):
    # turn requests are batched by arrival time, so the sampling draws (and weights) may differ under load; the
    # prompts, their order and the step count may not
    full, resumed, cut_out = _kill_and_resume(tiny_model_dir, task, tmp_path, "multi_turn", step=3, point="save")
    assert resumed["step"] == full["step"] == STEPS
    assert resumed["indices"] == full["indices"] == _uninterrupted_order(tiny_model_dir, task, tmp_path)
    assert not list(cut_out.glob(".tmp-*"))  # a save cut short by the kill was cleaned up


@SLOW
@pytest.mark.parametrize("mode", ["one_step_off", "fully_async_s1"])
def test_async_modes_resume_the_same_data_order(tiny_model_dir, task, tmp_path, mode):
    # killed after step 2 was logged and saved: the prompts of step 3 were already with the rollouter
    _, resumed, cut_out = _kill_and_resume(tiny_model_dir, task, tmp_path, mode, step=2, point="after", full=False)
    assert resumed["step"] == STEPS
    assert resumed["indices"] == _uninterrupted_order(tiny_model_dir, task, tmp_path)
    # the in-flight batch was generated again by the resumed (newer) weights: fresh, where an uninterrupted run's
    # batch 3 is one version old (as step 4 is here: the schedule goes on)
    staleness = _staleness(cut_out)
    assert staleness[2] == 1 and staleness[3] == 0 and staleness[4] == 1


def test_training_data_edited_in_place_is_refused_on_resume(tiny_model_dir, task, tmp_path):
    import pandas as pd

    from verl.trainer.ppo.resume_check import DataOrderError

    train = tmp_path / "train.parquet"
    pd.read_parquet(task["train"]).to_parquet(train)
    edited = {**task, "train": str(train)}
    out = tmp_path / "run"
    cfg = _overrides(tiny_model_dir, edited, out, "sync")
    run_ppo(load_config([*cfg, "trainer.total_training_steps=1"]))
    frame = pd.read_parquet(train)
    frame["prompt"] = list(reversed(frame["prompt"].tolist()))  # the same rows, other prompts at each position
    frame.to_parquet(train)
    with pytest.raises(DataOrderError, match=r"dataset row \d+ holds a different prompt than when the checkpoint"):
        run_ppo(load_config([*cfg, "trainer.total_training_steps=2"]))


def test_a_step_counted_twice_stops_the_run(tiny_model_dir, task, tmp_path, monkeypatch):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.resume_check import StepCounterError

    real_log = RayPPOTrainer._log

    def count_again(self, metrics, *args, **kwargs):  # a second counter advanced after step 1 (verl #7933)
        real_log(self, metrics, *args, **kwargs)
        if self.global_steps == 1:
            self.global_steps += 1

    monkeypatch.setattr(RayPPOTrainer, "_log", count_again)
    with pytest.raises(StepCounterError, match="went from 1 to 3 in one training step"):
        run_ppo(load_config(_overrides(tiny_model_dir, task, tmp_path / "run", "sync")))
