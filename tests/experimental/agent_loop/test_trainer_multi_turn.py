"""One PPO step with ``rollout.multi_turn.enable=true`` on the tiny model: the trainer's generation goes through
the hf engine's agent loops (a registered loop that inserts a tool reply between two generated turns), the
reward the loop earned reaches the token-level scores, and the ``agent/*`` (and ``val-agent/*``) metrics are
logged."""

from __future__ import annotations

import json
from typing import Any

import pytest

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.experimental.agent_loop.chat import encode_appended
from verl.trainer.config import load_config
from verl.trainer.ppo.runner import run_ppo

TOOL_REPLY = [{"role": "tool", "content": "42"}]


class ForcedToolAgentLoop(AgentLoopBase):
    """Two generated turns around a fixed tool reply (the tiny random model never writes a tool call itself);
    earns 0.25 of reward inside the loop."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        assert kwargs["raw_prompt"][0]["role"] == "user"  # the chat messages reach the engine
        prompt = list(kwargs["prompt_ids"])
        first = await self.server.generate(prompt, 3)
        tool = encode_appended(self.tokenizer, TOOL_REPLY)
        budget = self.settings.response_length - len(first.token_ids) - len(tool)
        second = await self.server.generate(prompt + first.token_ids + tool, budget)
        ids = first.token_ids + tool + second.token_ids
        mask = [1] * len(first.token_ids) + [0] * len(tool) + [1] * len(second.token_ids)
        return AgentLoopOutput(prompt, ids, mask, reward_score=0.25, num_turns=4, metrics={"tool_calls": {"fake": 1}})


REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "fully_async"])
def test_one_ppo_step_with_multi_turn_rollouts(tiny_model_dir: str, tmp_path, mode: str) -> None:
    """Synchronously, and with the agent loops running inside the fully asynchronous trainer's rollouter process
    (docs/async_training.md)."""
    train, test = generate_arithmetic_splits(train_size=4, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    (tmp_path / "reward.py").write_text(REWARD)
    (tmp_path / "loops.yaml").write_text(f"- name: forced_tool\n  _target_: {__name__}.ForcedToolAgentLoop\n")
    out = tmp_path / "out"
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={tmp_path / 'train.parquet'}",
            f"data.val_files={tmp_path / 'test.parquet'}",
            f"custom_reward_function.path={tmp_path / 'reward.py'}",
            "data.train_batch_size=2",
            "data.max_prompt_length=128",
            "data.max_response_length=40",
            "data.return_raw_chat=true",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.agent.default_agent_loop=forced_tool",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'loops.yaml'}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.rollout.dtype=float32",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=1",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            f"trainer.rollout_data_dir={out / 'rollouts'}",
            f"trainer.default_local_dir={out}",
        ]
        + (["async_training.mode=fully_async", "async_training.staleness_threshold=0"] if mode != "sync" else [])
    )
    run_ppo(cfg)
    (record,) = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    metrics = record["metrics"]
    assert metrics["agent/num_turns/mean"] == 4.0
    assert metrics["agent/tool_calls/fake"] == 1.0
    assert metrics["agent/reward/mean"] == 0.25
    # the reward function pays 0; the loop's 0.25 is added at each response's last token
    assert metrics["critic/score/mean"] == pytest.approx(0.25)
    assert metrics["critic/score/min"] == pytest.approx(0.25)
    assert "actor/pg_loss" in metrics
    # validation after the step runs the same loops (greedy) and logs them under val-agent/
    assert metrics["val-agent/num_turns/mean"] == 4.0 and metrics["val-agent/reward/mean"] == 0.25
    files = sorted((out / "rollouts").glob("*.jsonl"))
    dumps = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert dumps and all("<|tool|>42\n<|assistant|>" in d["output"] for d in dumps), dumps[:1]
