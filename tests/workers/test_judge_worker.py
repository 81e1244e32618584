"""The ``judge`` worker role (``reward_model.judge.backend=worker``): the worker group answers judge prompts exactly
as the in-driver ``hf`` backend does (1 and 2 local ranks, a batch the world size does not divide), and one GRPO
step with the judge reward creates the judge group and logs its scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.rewards.judge import JudgeRequestError, LLMJudge, WorkerGroupJudgeBackend
from verl.single_controller import create_worker_group
from verl.trainer.config import load_config
from verl.trainer.config.validation import ConfigError
from verl.workers.judge_worker import HFJudgeBackend, JudgeWorker

TEXTS = ["Rate the answer 2+2=4.", "hello judge", "x", "Is 7 prime? yes"]


@pytest.mark.parametrize("world_size", [1, 2])
def test_worker_group_answers_equal_the_in_driver_hf_backend(tiny_model_dir: str, world_size: int) -> None:
    # one row per generate call: every prompt is decoded alone on both sides, so greedy answers match exactly
    cfg = {"backend": "worker", "model": tiny_model_dir, "max_new_tokens": 6, "max_concurrency": 1}
    want = HFJudgeBackend.from_config(cfg).generate(TEXTS[:3])
    group = create_worker_group("local", JudgeWorker, {"config": cfg}, world_size=world_size)
    group.init_model()
    backend = WorkerGroupJudgeBackend(group)
    assert backend.generate(TEXTS[:3]) == want  # 3 rows over 2 ranks: padded, the padding dropped
    assert backend.generate([]) == []
    assert all(isinstance(a, str) and a for a in want)


def test_unbound_and_failing_groups() -> None:
    with pytest.raises(RuntimeError, match="no judge worker group is bound"):
        WorkerGroupJudgeBackend().generate(["q"])

    class Broken:
        def generate_judge_answers(self, data):
            raise OSError("rank 1 died")

    answers = WorkerGroupJudgeBackend(Broken()).generate(["a", "b"])
    assert len(answers) == 2 and all(isinstance(a, JudgeRequestError) and "rank 1 died" in str(a) for a in answers)
    # a failed batch is a request failure for every sample: on_error decides
    results = LLMJudge(WorkerGroupJudgeBackend(Broken()), on_error="zero").score(["q"], ["r"])
    assert results[0].score == 0.0 and results[0].request_failures == 1


def test_config_checks() -> None:
    with pytest.raises(ConfigError, match="reward_model.judge.model: reward_manager=judge with backend=worker"):
        load_config(["reward_model.reward_manager=judge", "reward_model.judge.backend=worker"])
    with pytest.raises(ConfigError, match="trainer.resource_pool_mapping.judge='global_pool': only a judge worker"):
        load_config(["trainer.resource_pool_mapping.judge=global_pool"])


def _digit_judge_dir(path: Path) -> str:
    """A tiny LM whose every greedy token is ``7`` or ``8`` (the sign of one hidden unit picks which), never EOS:
    the judge's answers always hold a rating the test's ``score_pattern`` reads as 0.7 or 0.8."""
    from transformers import AutoModelForCausalLM

    from verl.models.tiny import make_byte_tokenizer, make_tiny_model_dir

    make_tiny_model_dir(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path))
    tok = make_byte_tokenizer()
    seven, eight = (tok.encode(c, add_special_tokens=False)[0] for c in "78")
    with torch.no_grad():
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[seven, 0] = 1.0
        model.lm_head.weight[eight, 0] = -1.0
    model.save_pretrained(str(path))
    return str(path)


@pytest.mark.parametrize("placement", ["colocated", "own_pool"])
def test_grpo_step_with_a_judge_worker_group(tiny_model_dir: str, tmp_path: Path, placement: str) -> None:
    from verl.trainer.ppo.runner import build_ppo_trainer

    pool = ["trainer.resource_pool_spec.judge_pool=[1]", "trainer.resource_pool_mapping.judge=judge_pool"]

    judge_dir = _digit_judge_dir(tmp_path / "judge")
    train, test = generate_arithmetic_splits(train_size=4, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    config = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={tmp_path / 'train.parquet'}",
            f"data.val_files={tmp_path / 'test.parquet'}",
            "data.train_batch_size=2",
            "data.max_prompt_length=128",
            "data.max_response_length=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.rollout.dtype=float32",
            "algorithm.adv_estimator=grpo",
            "reward_model.reward_manager=judge",
            "reward_model.judge.backend=worker",
            f"reward_model.judge.model={judge_dir}",
            "reward_model.judge.score_pattern='([78])'",
            "reward_model.judge.max_new_tokens=3",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            f"trainer.default_local_dir={tmp_path / 'out'}",
            *(pool if placement == "own_pool" else []),
        ]
    )
    trainer = build_ppo_trainer(config)
    trainer.init_workers()
    # unmapped, the judge shares the actor's processes on global_pool (one process per rank holds both roles);
    # mapped, the pool's processes hold the judge alone
    worker = trainer.worker_groups["judge"].workers[0]
    want = "Colocated_actor_rollout_judge" if placement == "colocated" else "Colocated_judge"
    assert type(worker).__name__ == want
    assert trainer.reward_fn.judge.backend.worker_group is trainer.workers.judge
    assert trainer.val_reward_fn.judge.backend.worker_group is trainer.workers.judge
    trainer.fit()
    records = [json.loads(line) for line in (tmp_path / "out" / "logs" / "metrics.jsonl").read_text().splitlines()]
    (metrics,) = [r["metrics"] for r in records if "reward_extra/judge_score/mean" in r.get("metrics", {})]
    assert 0.7 - 1e-6 <= metrics["reward_extra/judge_score/mean"] <= 0.8 + 1e-6
    assert metrics["reward_extra/judge_parse_failure/mean"] == 0.0
    assert metrics["reward_extra/judge_request_failure/mean"] == 0.0
    # the reward is the judge's score: 0.7 or 0.8 at each response's last token
    scores = trainer.last_batch.batch["token_level_scores"].sum(-1)
    assert all(s == pytest.approx(0.7) or s == pytest.approx(0.8) for s in scores.tolist())
