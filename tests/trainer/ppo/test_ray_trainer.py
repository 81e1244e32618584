"""The PPO driver on a tiny model: logged metric names, logging backends, rollout dumps, checkpoint layout,
retention, atomic saves, resume modes and reward-function failures.

One module-scoped run (PPO with a critic, KL loss, sampled validation with n=2, a checkpoint every step) serves the
read-only checks; the tests that break or resume a run make their own short runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.runner import run_ppo
from verl.workers.reward_manager.abstract import RewardComputationError

# Pays the share of ASCII characters; "pred" (the first character) gives validation a majority vote to count;
# "hits" (the ASCII characters) and "ascii_share" (the score again) are numeric extras logged at every step.
REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    hits = sum(1 for ch in solution_str if ord(ch) < 128)
    score = hits / len(solution_str) if solution_str else 0.0
    return {"score": score, "pred": solution_str[:1], "hits": hits, "ascii_share": score}


def odd_answers_fail(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if int(ground_truth) % 2 == 1:
        raise ValueError(f"cannot grade answer {ground_truth}")
    return 1.0
"""

STEPS = 3
LOGP_ON = "actor_rollout_ref.rollout.calculate_log_probs=true"


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("trainer_task")
    train, test = generate_arithmetic_splits(train_size=16, test_size=3, seed=2)
    write_parquet(train, str(root / "train.parquet"))
    write_parquet(test, str(root / "test.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "val": str(root / "test.parquet"), "reward": str(root / "reward.py")}


def _config(model_dir: str, files: dict[str, str], out_dir: Path, extra: list[str]) -> DictConfig:
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={files['train']}",
        f"data.val_files={files['val']}",
        f"custom_reward_function.path={files['reward']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=128",
        "data.max_response_length=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "critic.dtype=float32",
        "critic.ppo_micro_batch_size_per_gpu=8",
        f"trainer.total_training_steps={STEPS}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=0",
        "trainer.logger=[file]",
        "trainer.resume_mode=auto",
        "trainer.export_hf=false",
        "trainer.plot=false",
        f"trainer.default_local_dir={out_dir}",
    ]
    return load_config(overrides + extra)


def _records(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "logs" / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def ppo_run(tiny_model_dir: str, task_files: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three PPO steps with every optional stage on; returns the output directory."""
    out = tmp_path_factory.mktemp("ppo_run")
    cfg = _config(
        tiny_model_dir,
        task_files,
        out,
        [
            "algorithm.adv_estimator=gae",
            "actor_rollout_ref.actor.use_kl_loss=true",
            # every stage on: recompute old log-probs even though the update is on-policy
            "actor_rollout_ref.actor.skip_old_log_prob_on_policy=false",
            "actor_rollout_ref.rollout.val_kwargs.n=2",
            "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
            "trainer.test_freq=3",
            "trainer.save_freq=1",
            "trainer.max_actor_ckpt_to_keep=2",
            "trainer.max_critic_ckpt_to_keep=1",
            "trainer.logger=[console,file,tensorboard]",
            f"trainer.rollout_data_dir={out / 'rollouts'}",
            f"trainer.validation_data_dir={out / 'validation'}",
        ],
    )
    run_ppo(cfg)
    return out


EXPECTED_TRAIN_METRICS = (
    [f"actor/{k}" for k in ("pg_loss", "kl_loss", "pg_clipfrac", "ppo_kl", "entropy", "grad_norm", "lr")]
    + [
        f"critic/{v}/{s}"
        for v in ("score", "rewards", "advantages", "returns", "values")
        for s in ("mean", "max", "min")
    ]
    + ["critic/vf_loss", "critic/vf_explained_var"]
    + [f"response_length/{s}" for s in ("mean", "max", "min", "clip_ratio")]
    + [f"prompt_length/{s}" for s in ("mean", "max", "min", "clip_ratio")]
    + [
        f"timing_s/{k}"
        for k in ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "step")
    ]
    + [f"timing_per_token_ms/{k}" for k in ("gen", "ref", "values", "adv", "update_critic", "update_actor")]
    + ["perf/total_num_tokens", "perf/time_per_step", "perf/throughput", "perf/max_memory_allocated_gb"]
    + ["training/global_step", "training/epoch", "timing_s/save_checkpoint"]
)


def test_metrics_with_verl_names_are_logged(ppo_run: Path) -> None:
    records = _records(ppo_run)
    assert [r["step"] for r in records] == [1, 2, 3]
    for record in records:
        metrics = record["metrics"]
        missing = [k for k in EXPECTED_TRAIN_METRICS if k not in metrics]
        assert not missing, (record["step"], missing)
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in metrics.values()), record
        assert metrics["training/global_step"] == record["step"]
        assert metrics["training/epoch"] == 0  # 16 prompts are 4 batches: 3 steps stay in the first epoch
        # 2-token responses: lengths in [1, 2] (the EOS counts), a response is clipped when it uses both slots
        assert 1 <= metrics["response_length/min"] <= metrics["response_length/mean"] <= 2
        assert 0 <= metrics["response_length/clip_ratio"] <= 1
        assert metrics["actor/lr"] == pytest.approx(1e-3)
        # fp32 is in no datasheet table: the peak is measured at the model's matmul shapes, and the MFU against it
        # is a fraction
        assert metrics["perf/peak_flops"] > 0 and metrics["perf/peak_flops_measured"] == 1
        assert 0 < metrics["perf/mfu/actor"] <= 1
    last = records[-1]["metrics"]
    # validation ran at step 3 only (test_freq=3): n=2 sampled responses per prompt
    for name in ("mean@2", "best@2/mean", "maj@2/mean"):
        assert f"val-core/arithmetic/reward/{name}" in last, name
    assert "timing_s/testing" in last
    assert not any(k.startswith("val-core/") for k in records[0]["metrics"])
    assert 0 <= last["val-core/arithmetic/reward/mean@2"] <= last["val-core/arithmetic/reward/best@2/mean"] <= 1


def test_reward_extras_are_logged_at_every_training_step(ppo_run: Path) -> None:
    """The reward function's numeric extras are training metrics (``reward_extra/<key>/{mean,max,min}``) at every
    step, not only at validation; the string extra ``pred`` is skipped."""
    records = _records(ppo_run)
    assert [r["step"] for r in records] == [1, 2, 3]
    for record in records:
        metrics = record["metrics"]
        # "ascii_share" is the score itself: its batch mean is the logged mean score
        assert metrics["reward_extra/ascii_share/mean"] == pytest.approx(metrics["critic/score/mean"])
        assert metrics["reward_extra/ascii_share/max"] == pytest.approx(metrics["critic/score/max"])
        # 2-token responses of a byte tokenizer: 0 to 2 ASCII characters
        assert 0 <= metrics["reward_extra/hits/min"] <= metrics["reward_extra/hits/mean"] <= 2
        assert metrics["reward_extra/hits/mean"] <= metrics["reward_extra/hits/max"] <= 2
        assert not any(k.startswith("reward_extra/pred") for k in metrics)


def test_rollout_dump_matches_the_logged_scores(ppo_run: Path) -> None:
    records = {r["step"]: r["metrics"] for r in _records(ppo_run)}
    for step in range(1, STEPS + 1):
        rows = [json.loads(line) for line in (ppo_run / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        assert len(rows) == 4 * 2  # train_batch_size x rollout.n
        for row in rows:
            assert {"input", "output", "score", "step", "ground_truth"} <= set(row)
            assert row["step"] == step and "What is" in row["input"]
            # the dump holds the very reward the custom function computes from the decoded response
            text = row["output"]
            expected = sum(1 for ch in text if ord(ch) < 128) / len(text) if text else 0.0
            assert row["score"] == pytest.approx(expected)
        assert records[step]["critic/score/mean"] == pytest.approx(sum(r["score"] for r in rows) / len(rows))
    # validation generations: 3 prompts x val n=2, dumped at the validation step only
    val_rows = [json.loads(line) for line in (ppo_run / "validation" / "3.jsonl").read_text().splitlines()]
    assert len(val_rows) == 6
    assert sorted((ppo_run / "validation").iterdir()) == [ppo_run / "validation" / "3.jsonl"]


def test_file_and_tensorboard_logs_are_written(ppo_run: Path) -> None:
    logs = ppo_run / "logs"
    config = json.loads((logs / "config.json").read_text())
    assert config["algorithm"]["adv_estimator"] == "gae"
    events = list((logs / "tensorboard").glob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logs / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("critic/score/mean")] == [1, 2, 3]
    logged = {r["step"]: r["metrics"]["critic/score/mean"] for r in _records(ppo_run)}
    assert [e.value for e in acc.Scalars("critic/score/mean")] == pytest.approx([logged[s] for s in (1, 2, 3)])


def test_checkpoint_layout_and_retention(ppo_run: Path) -> None:
    assert (ppo_run / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    # actor keeps 2 steps, critic keeps 1: step 1 is gone, step 2 has only the actor, step 3 both
    assert not (ppo_run / "global_step_1").exists()
    assert (ppo_run / "global_step_2" / "actor").is_dir()
    assert not (ppo_run / "global_step_2" / "critic").exists()
    for role in ("actor", "critic"):
        role_dir = ppo_run / "global_step_3" / role
        assert (role_dir / "huggingface" / "config.json").is_file()
        assert (role_dir / "optim_world_size_1_rank_0.safetensors").is_file()
        assert list(role_dir.glob("extra_state_world_size_1_rank_0.pt"))
    assert (ppo_run / "global_step_3" / "data.pt").is_file()
    # no temporary directory of an atomic write is left behind
    assert sorted(p.name for p in ppo_run.iterdir() if p.name.startswith("global_step_")) == [
        "global_step_2",
        "global_step_3",
    ]
    assert not [p for p in ppo_run.iterdir() if p.name.startswith(".")]


class _DiskFull(OSError):
    """Stands in for a failure in the middle of writing a checkpoint."""


def test_failed_save_leaves_the_previous_checkpoint_intact(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg_extra = ["trainer.save_freq=1", "trainer.total_training_steps=2"]
    real_state = RayPPOTrainer.driver_state

    def failing_driver_state(self: RayPPOTrainer):
        # the actor's files for step 2 are already written into the temporary directory at this point
        if self.global_steps == 2:
            raise _DiskFull("no space left on device")
        return real_state(self)

    with monkeypatch.context() as patch:
        patch.setattr(RayPPOTrainer, "driver_state", failing_driver_state)
        with pytest.raises(_DiskFull):
            run_ppo(_config(tiny_model_dir, task_files, tmp_path, cfg_extra))
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    # neither a half-written global_step_2 nor its temporary directory is left
    assert sorted(p.name for p in tmp_path.iterdir() if "global_step" in p.name) == ["global_step_1"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert (tmp_path / "global_step_1" / "actor" / "model_world_size_1_rank_0.safetensors").is_file()
    # the surviving checkpoint is usable: a new run resumes from it and only trains step 2
    run_ppo(_config(tiny_model_dir, task_files, tmp_path, cfg_extra))
    assert [r["step"] for r in _records(tmp_path)] == [1, 2]
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text().strip() == "2"


def test_resume_modes_disable_and_resume_path(tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path) -> None:
    run_ppo(_config(tiny_model_dir, task_files, tmp_path, ["trainer.save_freq=1", "trainer.total_training_steps=2"]))
    assert [r["step"] for r in _records(tmp_path)] == [1, 2]
    # resume_path: an explicit older checkpoint wins over the latest one; step 2 runs again and is logged once
    run_ppo(
        _config(
            tiny_model_dir,
            task_files,
            tmp_path,
            [
                "trainer.resume_mode=resume_path",
                f"trainer.resume_from_path={tmp_path / 'global_step_1'}",
                "trainer.total_training_steps=2",
            ],
        )
    )
    assert [r["step"] for r in _records(tmp_path)] == [1, 2]
    # disable in a directory that holds checkpoints: refused (the steps of two runs would interleave) ...
    disable = ["trainer.resume_mode=disable", "trainer.total_training_steps=1"]
    with pytest.raises(FileExistsError, match="already holds checkpoints"):
        run_ppo(_config(tiny_model_dir, task_files, tmp_path, disable))
    # ... unless told to overwrite: the old checkpoints go and training starts again at step 1
    run_ppo(_config(tiny_model_dir, task_files, tmp_path, disable + ["trainer.overwrite_checkpoints=true"]))
    assert [r["step"] for r in _records(tmp_path)] == [1]
    assert not (tmp_path / "global_step_2").exists()


def test_reward_function_errors_fail_or_count(tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path) -> None:
    failing = [
        "custom_reward_function.name=odd_answers_fail",
        "trainer.total_training_steps=1",
        f"trainer.rollout_data_dir={tmp_path / 'zero' / 'rollouts'}",
    ]
    with pytest.raises(
        RewardComputationError,
        match=r"reward for sample \d+ \(data_source='arithmetic'\) failed: "
        r"ValueError: cannot grade answer \d*[13579]",
    ):
        run_ppo(_config(tiny_model_dir, task_files, tmp_path / "fail", failing + ["reward_model.on_error=fail"]))

    run_ppo(_config(tiny_model_dir, task_files, tmp_path / "zero", failing + ["reward_model.on_error=zero"]))
    metrics = _records(tmp_path / "zero")[0]["metrics"]
    rows = [json.loads(line) for line in (tmp_path / "zero" / "rollouts" / "1.jsonl").read_text().splitlines()]
    odd = sum(1 for r in rows if int(r["ground_truth"]) % 2 == 1)
    assert 0 < odd < len(rows)  # the batch holds both kinds, so the count is informative
    assert metrics["reward/num_errors"] == odd
    # failed samples score 0, the others 1
    assert [r["score"] for r in rows] == [0.0 if int(r["ground_truth"]) % 2 else 1.0 for r in rows]
    assert metrics["critic/score/mean"] == pytest.approx(1 - odd / len(rows))


def test_worker_roles_and_the_step_counter_have_one_home(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path
) -> None:
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

    class MyActor(ActorRolloutRefWorker):
        pass

    grpo = _config(tiny_model_dir, task_files, tmp_path, ["algorithm.adv_estimator=grpo"])
    driver = RayPPOTrainer(
        grpo,
        tokenizer=None,
        role_worker_mapping={"actor_rollout": MyActor},
        role_kwargs={"actor_rollout": {"actor_module": "the user's model"}},
    )
    roles = driver.worker_roles()
    assert set(roles) == {"actor_rollout"}  # GRPO without a KL: no critic, no reference policy
    cls, kwargs = roles["actor_rollout"]
    assert cls is MyActor and kwargs["role"] == "actor_rollout" and kwargs["actor_module"] == "the user's model"

    ppo = _config(tiny_model_dir, task_files, tmp_path, ["actor_rollout_ref.actor.use_kl_loss=true"])
    roles = RayPPOTrainer(ppo, tokenizer=None).worker_roles()
    assert roles["critic"][0] is CriticWorker and roles["actor_rollout"][1]["role"] == "actor_rollout_ref"

    with driver.next_step() as step:
        assert step == 1 == driver.global_steps
    with driver.next_step() as step:
        assert step == 2


def _spy_policy_loss(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Record the tensors each actor micro-batch hands to its policy loss."""
    import verl.workers.actor.dp_actor as dp_actor

    seen: list[dict] = []
    real = dp_actor.get_policy_loss_fn

    def spying(name: str):
        fn = real(name)

        def wrapped(**kwargs):
            seen.append({k: kwargs[k] for k in ("old_log_prob", "rollout_is_weights", "response_mask")})
            return fn(**kwargs)

        return wrapped

    monkeypatch.setattr(dp_actor, "get_policy_loss_fn", spying)
    return seen


@pytest.mark.parametrize("mode", ["correct", "bypass", "observe"])
def test_rollout_correction_step(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """One GRPO step with rollout correction: the rollout_corr/* metrics are logged and the actor's loss gets the
    weights; in bypass mode the old-log-prob pass is skipped and the rollout's log-probs are the old policy; with the
    correction off the mismatch metrics are logged whenever both log-probs are there."""
    seen = _spy_policy_loss(monkeypatch)
    rc = "algorithm.rollout_correction"
    extra = ["algorithm.adv_estimator=grpo", "trainer.total_training_steps=1", LOGP_ON]
    extra += {
        "correct": [f"{rc}.rollout_is=token", f"{rc}.rollout_is_threshold=3.0", f"{rc}.rollout_rs=token"],
        # the update is not treated as on-policy, so only bypass mode can skip the old-log-prob pass; the actor
        # refuses a batch without old_log_probs there, so the rollout's log-probs must have taken their place
        "bypass": [f"{rc}.bypass_mode=true", "actor_rollout_ref.actor.skip_old_log_prob_on_policy=false"],
        "observe": ["actor_rollout_ref.actor.skip_old_log_prob_on_policy=false"],
    }[mode]
    run_ppo(_config(tiny_model_dir, task_files, tmp_path, extra))
    (record,) = [r["metrics"] for r in _records(tmp_path) if "actor/pg_loss" in r.get("metrics", {})]
    assert seen
    if mode == "bypass":
        assert "timing_s/old_log_prob" not in record and "rollout_corr/rollout_is_mean" not in record
        # the gap to the rollout is still measured, on the actor's pre-update forward (verl/trainer/ppo/invariants.py)
        assert record["rollout_corr/k3_kl"] < 1e-4 and math.isfinite(record["rollout_corr/log_prob_abs_diff_max"])
        assert all(s["rollout_is_weights"] is None for s in seen)
        return
    # the default update is on-policy (old log-probs skipped); the correction needs them, so the pass ran
    assert "timing_s/old_log_prob" in record
    for key in ("kl", "k3_kl", "ppl_ratio", "training_ppl", "rollout_ppl", "chi2_token"):
        assert math.isfinite(record[f"rollout_corr/{key}"]), key
    # hf engine and actor in float32 on the same weights: the two policies agree closely
    assert abs(record["rollout_corr/ppl_ratio"] - 1) < 1e-3 and record["rollout_corr/k3_kl"] < 1e-4
    if mode == "observe":
        assert "rollout_corr/rollout_is_mean" not in record and all(s["rollout_is_weights"] is None for s in seen)
        return
    for key in ("rollout_is_mean", "rollout_is_max", "rollout_is_ratio_fraction_high", "rollout_rs_masked_fraction"):
        assert math.isfinite(record[f"rollout_corr/{key}"]), key
    for s in seen:
        w = s["rollout_is_weights"]
        assert w is not None and w.shape == s["old_log_prob"].shape
        valid = s["response_mask"].bool()
        assert torch.allclose(w[valid], torch.ones_like(w[valid]), atol=1e-2) and (w[~valid] == 0).all()
