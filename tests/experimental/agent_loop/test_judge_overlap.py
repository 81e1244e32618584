"""``reward_model.judge.overlap_rollout``: the agent loops send each trajectory's judge request as soon as it ends
(against the scripted judge endpoint of tests/conftest.py), and the ``judge`` reward manager scores the batch from
those answers exactly as it would by asking the judge itself, without a second request."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest
import torch

from verl.base_config import omega_conf_to_dataclass
from verl.experimental.agent_loop.judge_overlap import JUDGE_COLUMNS, JudgeOverlap
from verl.experimental.agent_loop.runner import AgentLoopRunner
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.workers.config import RolloutConfig
from verl.workers.reward_manager import JudgeRewardManager

TOOL_DONE: list[float] = []  # perf_counter times at which SlowJudgeTool calls returned


class SlowJudgeTool(BaseTool):
    """Sleeps ``config.delay_s`` without blocking the event loop; records when it returns."""

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {"name": "slow"}})

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        await asyncio.sleep(float(self.config["delay_s"]))
        TOOL_DONE.append(time.perf_counter())
        return ToolResponse(text="done"), 0.0, {}


def _rollout(tok, kit, tmp_path, judge: JudgeOverlap) -> Any:
    path = tmp_path / "slow.yaml"
    path.write_text(f"tools:\n  - class_name: {__name__}.SlowJudgeTool\n    config: {{type: native, delay_s: 0.4}}\n")
    call = '<tool_call>{"name": "slow", "arguments": {}}</tool_call>'
    # Q0 waits for the slow tool, then answers; the others answer at once (Q3's answer makes the judge fail)
    scripts = {"Q0": [call, "good after the tool"], "Q1": ["good"], "Q2": ["bad"], "Q3": ["fail"]}
    engine = kit.ScriptedEngine(tok, scripts)
    config = kit.rollout_config(tool_config_path=str(path), agent_num_workers=2)
    runner = AgentLoopRunner(omega_conf_to_dataclass(config, RolloutConfig), tok, engine, judge=judge)
    batch = kit.prompt_batch(tok, [f"Q{i}" for i in range(4)])
    truths = np.empty(4, dtype=object)
    truths[:] = [{"ground_truth": f"t{i}"} for i in range(4)]
    batch.non_tensor_batch["reward_model"] = truths
    out = runner.generate_sequences(batch)
    # what the trainer joins back from the prompt batch before the reward
    out.non_tensor_batch["reward_model"] = truths
    out.non_tensor_batch["data_source"] = np.array(["chat"] * 4, dtype=object)
    return out


def test_judged_while_loops_run_and_reused_by_the_reward_manager(tok, kit, tmp_path, judge_server) -> None:
    cfg = {
        "url": judge_server["url"],
        "max_retries": 0,
        "max_concurrency": 2,
        "template": "{prompt} || {response} || truth={ground_truth}",
    }
    TOOL_DONE.clear()
    out = _rollout(tok, kit, tmp_path, JudgeOverlap.from_config(cfg))
    assert judge_server["requests"] == 4 and judge_server["max_in_flight"] <= 2
    # the fast rows were judged while Q0 still waited for its tool (it then generated once more)
    assert len(TOOL_DONE) == 1 and min(judge_server["arrivals"]) < TOOL_DONE[0]
    answers = out.non_tensor_batch["judge_overlap_answer"]
    errors = out.non_tensor_batch["judge_overlap_error"]
    assert [a is None for a in answers] == [False, False, False, True] and "HTTP 500" in errors[3]
    assert all(float(x) >= 0 for x in out.non_tensor_batch["judge_overlap_latency_s"])
    sent = [b["messages"][-1]["content"] for b in judge_server["bodies"]]
    assert any("good after the tool" in t and "truth=t0" in t for t in sent)

    manager = JudgeRewardManager(tok, 0, judge_config=cfg, num_workers=0)
    reused = manager(out, return_dict=True)
    assert judge_server["requests"] == 4 and manager.reused_batches == 1  # no second request

    # the after-rollout path on the same batch: the manager asks the judge itself
    plain = out.select(non_tensor_batch_keys=[k for k in out.non_tensor_batch if k not in JUDGE_COLUMNS])
    asked = manager(plain, return_dict=True)
    assert judge_server["requests"] == 8 and manager.reused_batches == 1
    assert torch.equal(reused["reward_tensor"], asked["reward_tensor"])
    assert reused["reward_tensor"].sum(-1).tolist() == pytest.approx([0.8, 0.8, 0.2, 0.0])
    info_a, info_b = reused["reward_extra_info"], asked["reward_extra_info"]
    assert sorted(info_a) == sorted(info_b)
    for key in ("judge_score", "judge_parse_failure", "judge_request_failure", "judge_skipped"):
        assert info_a[key] == info_b[key], key
    assert info_a["judge_request_failure"] == [0, 0, 0, 1] and info_a["reward/judge_request_failures"] == [1]
    assert len(info_a["judge_latency_s"]) == 4


def test_changed_response_is_judged_again(tok, kit, tmp_path, judge_server) -> None:
    cfg = {"url": judge_server["url"], "max_retries": 0}
    out = _rollout(tok, kit, tmp_path, JudgeOverlap.from_config(cfg))
    out.batch["responses"][1, 0] = ord("X")  # no longer the response that was judged
    manager = JudgeRewardManager(tok, 0, judge_config=cfg, num_workers=0)
    manager(out)
    assert judge_server["requests"] == 8 and manager.reused_batches == 0


def test_overlap_needs_a_pointwise_openai_judge(judge_server) -> None:
    with pytest.raises(ValueError, match="mode=pointwise"):
        JudgeOverlap.from_config({"url": judge_server["url"], "mode": "pairwise"})


# ------------------------------------------------------------------------------------------------- config checks
_ON = ["reward_model.reward_manager=judge", "reward_model.judge.url=http://127.0.0.1:9/v1"]
_OVERLAP = ["reward_model.judge.overlap_rollout=true", "actor_rollout_ref.rollout.multi_turn.enable=true"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [*_ON, *_OVERLAP, "reward_model.judge.backend=hf", "reward_model.judge.model=/m"],
            "reward_model.judge.overlap_rollout=true needs reward_model.judge.backend=openai",
        ),
        (
            [*_ON, *_OVERLAP, "reward_model.judge.mode=pairwise"],
            "reward_model.judge.overlap_rollout=true needs reward_model.judge.mode=pointwise",
        ),
        (
            [*_ON, "reward_model.judge.overlap_rollout=true"],
            "reward_model.judge.overlap_rollout=true judges agent-loop trajectories as they end: it needs "
            "actor_rollout_ref.rollout.multi_turn.enable=true",
        ),
        (
            _OVERLAP,
            "reward_model.judge.overlap_rollout=true judges for the judge reward manager",
        ),
    ],
)
def test_overlap_config_errors_name_the_key(overrides: list[str], message: str) -> None:
    from verl.trainer.config.loader import load_config
    from verl.trainer.config.validation import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    assert message in str(err.value)


def test_overlap_config_reaches_the_agent_loop_manager() -> None:
    """The driver's agent-loop manager builds the judge; the actor worker is given nothing of it."""
    from verl.models.tiny import make_byte_tokenizer
    from verl.trainer.config.loader import load_config
    from verl.trainer.ppo.batch_rollout import make_agent_loop_manager

    cfg = load_config([*_ON, *_OVERLAP])
    manager = make_agent_loop_manager(cfg, make_byte_tokenizer(), object())
    assert manager.judges_rollout and manager.runner.judge.judge.backend.url.startswith("http://127.0.0.1:9/v1")
    assert "judge_config" not in _roles_only(cfg).roles()["actor_rollout"][1]
    plain = load_config([*_ON, "actor_rollout_ref.rollout.multi_turn.enable=true"])
    assert not make_agent_loop_manager(plain, make_byte_tokenizer(), object()).judges_rollout
    assert make_agent_loop_manager(load_config(_ON), make_byte_tokenizer(), object()) is None


def _roles_only(cfg: Any) -> Any:
    """The driver's worker part alone (no workers created, no data), with no optional role."""
    from verl.trainer.ppo.driver_workers import DriverWorkers

    return DriverWorkers(cfg, dict(reference=False, critic=False, reward_model=False, teacher=False, judge=False))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "fully_async"])
def test_one_ppo_step_judged_during_the_rollout(tiny_model_dir: str, tmp_path, judge_server, monkeypatch, mode) -> None:
    """The trainer hands the judge section to the rollout worker (the fully asynchronous trainer's rollouter
    process too); training and validation rows are each judged once, during the rollout, and the step's reward
    comes from those answers."""
    import json

    from verl.rewards.judge import LLMJudge

    def must_not_ask(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the reward manager asked the judge again")

    monkeypatch.setattr(LLMJudge, "score", must_not_ask)  # the local backend: workers and manager in this process

    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
    from verl.trainer.config import load_config
    from verl.trainer.ppo.runner import run_ppo

    train, test = generate_arithmetic_splits(train_size=4, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    out = tmp_path / "out"
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={tmp_path / 'train.parquet'}",
            f"data.val_files={tmp_path / 'test.parquet'}",
            "data.train_batch_size=2",
            "data.max_prompt_length=128",
            "data.max_response_length=16",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "reward_model.reward_manager=judge",
            f"reward_model.judge.url={judge_server['url']}",
            "reward_model.judge.max_retries=0",
            "reward_model.judge.template='{prompt} => {response} (truth: {ground_truth})'",
            "reward_model.judge.overlap_rollout=true",
            "reward_model.num_workers=0",
            "reward_model.timeout_s=0",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=1",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            f"trainer.default_local_dir={out}",
        ]
        + (["async_training.mode=fully_async", "async_training.staleness_threshold=0"] if mode != "sync" else [])
    )
    run_ppo(cfg)
    (record,) = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert judge_server["requests"] == 2 * 2 + 2  # 2 prompts x n=2 in training, 2 in validation: each once
    assert "reward_extra/judge_score/mean" in record["metrics"]
    sent = [b["messages"][-1]["content"] for b in judge_server["bodies"]]
    assert all("(truth: " in t and not t.endswith("(truth: )") for t in sent)  # the ground truth reached the engine
