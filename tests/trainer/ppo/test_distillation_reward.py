"""On-policy distillation in a PPO run (``distillation`` section): the dense reverse-KL reward token by token, and
one GRPO step with a teacher worker whose log-probs are checked against the teacher model itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.protocol import DataProto
from verl.trainer.config import load_config
from verl.trainer.config.validation import ConfigError
from verl.trainer.ppo.batch_transforms import apply_distillation_reward

REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 0.25
"""


def test_distillation_reward_token_by_token():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -0.3, -4.0]])
    teacher = torch.tensor([[-0.5, -2.5, -3.0], [-1.2, -0.1, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    scores = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.5]])
    data = DataProto.from_dict(
        tensors={"old_log_probs": old, "teacher_log_prob": teacher, "response_mask": mask, "token_level_scores": scores}
    )
    data, metrics = apply_distillation_reward(data, coef=0.5, task_reward_weight=2.0)
    got = data.batch["token_level_scores"]
    for b in range(2):
        for t in range(3):
            dense = -0.5 * (old[b, t] - teacher[b, t]).item() if mask[b, t] else 0.0
            assert got[b, t].item() == pytest.approx(2.0 * scores[b, t].item() + dense)
    diffs = [(old[b, t] - teacher[b, t]).item() for b in range(2) for t in range(3) if mask[b, t]]
    assert metrics["distill/reverse_kl"] == pytest.approx(sum(diffs) / len(diffs))
    # the task reward alone (per-sequence sums 1.0 and 0.5), apart from the mixed score
    assert metrics["distill/task_score/mean"] == pytest.approx(0.75)
    assert (metrics["distill/task_score/max"], metrics["distill/task_score/min"]) == (1.0, 0.5)
    with pytest.raises(ValueError, match="teacher_log_prob"):
        apply_distillation_reward(DataProto.from_dict(tensors={"old_log_probs": old, "response_mask": mask}), 1.0)


def test_config_checks():
    with pytest.raises(ConfigError, match="distillation.teacher.path"):
        load_config(["distillation.enable=true"])
    with pytest.raises(ConfigError, match="reward_model.judge.url"):
        load_config(["reward_model.reward_manager=judge"])


def test_grpo_step_with_a_teacher_worker(tiny_model_dir: str, tmp_path: Path):
    from verl.models.tiny import make_tiny_model_dir
    from verl.trainer.ppo.runner import build_ppo_trainer

    teacher_dir = make_tiny_model_dir(str(tmp_path / "teacher"), seed=7)
    train, test = generate_arithmetic_splits(train_size=4, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    (tmp_path / "reward.py").write_text(REWARD)
    config = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={tmp_path / 'train.parquet'}",
            f"data.val_files={tmp_path / 'test.parquet'}",
            f"custom_reward_function.path={tmp_path / 'reward.py'}",
            "data.train_batch_size=2",
            "data.max_prompt_length=128",
            "data.max_response_length=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.rollout.dtype=float32",
            "algorithm.adv_estimator=grpo",
            "distillation.enable=true",
            f"distillation.teacher.path={teacher_dir}",
            "distillation.coef=0.5",
            "distillation.task_reward_weight=2.0",
            "distillation.dtype=float32",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            f"trainer.default_local_dir={tmp_path / 'out'}",
        ]
    )
    trainer = build_ppo_trainer(config)
    trainer.init_workers()
    trainer.fit()
    batch = trainer.last_batch
    records = [json.loads(line) for line in (tmp_path / "out" / "logs" / "metrics.jsonl").read_text().splitlines()]
    (metrics,) = [r["metrics"] for r in records if "distill/reverse_kl" in r.get("metrics", {})]
    assert "timing_s/teacher" in metrics and "timing_s/old_log_prob" in metrics

    # the teacher worker's log-probs are those of the teacher model on the same tokens
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir)
    ids, mask = batch.batch["input_ids"], batch.batch["attention_mask"]
    response_len = batch.batch["responses"].shape[-1]
    with torch.no_grad():
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logp = torch.log_softmax(teacher(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float(), -1)
    want = logp[:, -response_len - 1 : -1].gather(-1, ids[:, -response_len:, None]).squeeze(-1)
    rmask = batch.batch["response_mask"].bool()
    assert torch.allclose(batch.batch["teacher_log_prob"][rmask], want[rmask], atol=1e-4)

    # the scores are 2 x the task reward (0.25 at the last response token) plus the dense term on every token
    dense = -0.5 * (batch.batch["old_log_probs"] - batch.batch["teacher_log_prob"]) * rmask
    task = batch.batch["token_level_scores"] - dense
    last = rmask.long().sum(-1) - 1
    for row in range(task.shape[0]):
        assert task[row, last[row]].item() == pytest.approx(0.5, abs=1e-5)
        others = torch.ones_like(rmask[row])
        others[last[row]] = False
        assert task[row][others].abs().max().item() < 1e-5


def test_grpo_step_with_two_routed_teachers(tiny_model_dir: str, tmp_path: Path):
    """upstream v0.9's multi-teacher keys through a real GRPO step: rows of two data sources, each scored by its own
    teacher (the one named by its data_source), with per-teacher metrics."""
    from verl.models.tiny import make_tiny_model_dir
    from verl.trainer.ppo.runner import build_ppo_trainer

    paths = {"alpha": make_tiny_model_dir(str(tmp_path / "ta"), seed=7)}
    paths["beta"] = make_tiny_model_dir(str(tmp_path / "tb"), seed=8)
    train, test = generate_arithmetic_splits(train_size=4, test_size=2, seed=3)
    for i, row in enumerate(train):
        row["data_source"] = f"src_{'alpha' if i % 2 == 0 else 'beta'}"
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    (tmp_path / "reward.py").write_text(REWARD)
    teachers = [
        f"+distillation.teacher_models.{name}.{key}={value}"
        for name in ("alpha", "beta")
        for key, value in (("key", f"src_{name}"), ("model_path", paths[name]), ("inference.dtype", "float32"))
    ]
    config = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={tmp_path / 'train.parquet'}",
            f"data.val_files={tmp_path / 'test.parquet'}",
            f"custom_reward_function.path={tmp_path / 'reward.py'}",
            "data.train_batch_size=2",
            "data.shuffle=false",
            "data.max_prompt_length=128",
            "data.max_response_length=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.rollout.dtype=float32",
            "algorithm.adv_estimator=grpo",
            "distillation.enabled=true",
            "distillation.teacher_key=data_source",
            *teachers,
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            f"trainer.default_local_dir={tmp_path / 'out'}",
        ]
    )
    trainer = build_ppo_trainer(config)
    trainer.init_workers()
    trainer.fit()
    batch = trainer.last_batch
    records = [json.loads(line) for line in (tmp_path / "out" / "logs" / "metrics.jsonl").read_text().splitlines()]
    (metrics,) = [r["metrics"] for r in records if "distill/reverse_kl" in r.get("metrics", {})]
    assert metrics["distill/alpha/rows"] == 2 and metrics["distill/beta/rows"] == 2

    ids, mask = batch.batch["input_ids"], batch.batch["attention_mask"]
    response_len = batch.batch["responses"].shape[-1]
    rmask = batch.batch["response_mask"].bool()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    names = list(batch.non_tensor_batch["teacher_name"])
    assert [f"src_{n}" for n in names] == list(batch.non_tensor_batch["data_source"])
    for name, path in paths.items():
        with torch.no_grad():
            logits = AutoModelForCausalLM.from_pretrained(path)(input_ids=ids, attention_mask=mask, position_ids=pos)
        logp = torch.log_softmax(logits.logits.float(), -1)
        want = logp[:, -response_len - 1 : -1].gather(-1, ids[:, -response_len:, None]).squeeze(-1)
        for row in (r for r, n in enumerate(names) if n == name):
            got = batch.batch["teacher_log_prob"][row][rmask[row]]
            assert torch.allclose(got, want[row][rmask[row]], atol=1e-4), (name, row)
