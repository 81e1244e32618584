"""The one rollout path (verl/trainer/ppo/batch_rollout.py): layout of a generated group batch, group ids, padding
to the ranks, scoring with and without a reward model, decoding; and that the callers go through it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.batch_rollout import (
    attach_scores,
    decode_generations,
    generate_groups,
    generate_on_group,
    score_rollouts,
    tag_groups,
)

RESPONSE_LEN = 3


def _prompts(byte_tokenizer, texts: list[str]) -> DataProto:
    ids = [byte_tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, ids))
    pad = byte_tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(x) for x in ids])[:, None]).long()
    return DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
        non_tensors={
            "data_source": np.array(["src"] * len(texts), dtype=object),
            "reward_model": np.array([{"ground_truth": t.upper()} for t in texts], dtype=object),
        },
    )


class EchoEngine:
    """Answers every prompt with its first RESPONSE_LEN tokens; records the calls' meta and sizes."""

    def __init__(self, world_size: int = 1) -> None:
        self.world_size = world_size
        self.calls: list[tuple[int, dict]] = []

    def generate_sequences(self, gen: DataProto) -> DataProto:
        assert set(gen.batch.keys()) <= {"input_ids", "attention_mask", "position_ids"}
        assert gen.non_tensor_batch == {}, "the engine gets only the prompt tensors"
        assert len(gen) % self.world_size == 0, "dispatch over ranks needs an even split"
        self.calls.append((len(gen), dict(gen.meta_info)))
        prompts = gen.batch["input_ids"]
        responses = prompts[:, -RESPONSE_LEN:].clone()
        response_mask = torch.ones_like(responses)
        response_mask[:, -1] = 0  # the last token is padding: decoding must drop it
        return DataProto.from_dict(
            tensors={
                "prompts": prompts,
                "responses": responses,
                "response_mask": response_mask,
                "input_ids": torch.cat([prompts, responses], -1),
                "attention_mask": torch.cat([gen.batch["attention_mask"], response_mask], -1),
            },
            meta_info={"engine": "echo"},
        )


def test_generate_groups_lays_out_n_responses_per_prompt_and_leaves_the_prompts_alone(byte_tokenizer) -> None:
    prompts = _prompts(byte_tokenizer, ["abcd", "xyz"])
    before_keys = set(prompts.non_tensor_batch)
    engine = EchoEngine()
    out = generate_groups(prompts, 3, engine.generate_sequences, {"do_sample": False, "eos_token_id": 7})

    assert len(out) == 6
    assert set(prompts.non_tensor_batch) == before_keys  # no uid written into the caller's batch
    uids = out.non_tensor_batch["uid"]
    assert len(set(uids[:3])) == 1 and len(set(uids[3:])) == 1 and uids[0] != uids[3]
    assert [rm["ground_truth"] for rm in out.non_tensor_batch["reward_model"]] == ["ABCD"] * 3 + ["XYZ"] * 3
    assert engine.calls == [(6, {"do_sample": False, "eos_token_id": 7})]
    assert out.meta_info["engine"] == "echo"
    prompts_text, responses, extra = decode_generations(byte_tokenizer, out)
    assert prompts_text[0] == "abcd" and prompts_text[3].endswith("xyz")
    assert responses[:3] == ["bc"] * 3 and responses[3:] == ["xy"] * 3  # masked last token dropped
    assert extra["ground_truth"][0] == "ABCD"


def test_tagged_prompts_keep_their_groups_across_generations(byte_tokenizer) -> None:
    prompts = tag_groups(_prompts(byte_tokenizer, ["ab", "cd"]))
    engine = EchoEngine()
    sampled = generate_groups(prompts, 2, engine.generate_sequences)
    greedy = generate_groups(prompts, 2, engine.generate_sequences, {"do_sample": False})
    assert list(sampled.non_tensor_batch["uid"]) == list(greedy.non_tensor_batch["uid"])


def test_generation_is_padded_to_the_ranks_and_unpadded(byte_tokenizer) -> None:
    engine = EchoEngine(world_size=4)
    out = generate_groups(
        _prompts(byte_tokenizer, ["abc", "def", "ghi"]), 1, lambda gen: generate_on_group(engine, gen)
    )
    assert engine.calls[0][0] == 4 and len(out) == 3
    assert out.batch["responses"][2].tolist() == byte_tokenizer("ghi", add_special_tokens=False)["input_ids"]


def test_score_uses_the_reward_model_then_the_reward_function(byte_tokenizer) -> None:
    rollouts = generate_groups(_prompts(byte_tokenizer, ["ab", "cd"]), 2, EchoEngine().generate_sequences)

    class RewardModelGroup:
        def compute_rm_score(self, data: DataProto) -> DataProto:
            return DataProto.from_dict(tensors={"rm_scores": torch.full(data.batch["responses"].shape, 0.5)})

    def reward_fn(data: DataProto, return_dict: bool = False):
        scores = torch.zeros(data.batch["responses"].shape)
        scores[:, 0] = 1.0 + ("rm_scores" in data.batch.keys())
        extra = {"acc": [1.0] * len(data), "reward/calls": [1]}
        return {"reward_tensor": scores, "reward_extra_info": extra} if return_dict else scores

    scored, scores, extra = score_rollouts(rollouts, reward_fn, RewardModelGroup())
    assert "rm_scores" in scored.batch.keys() and scores[:, 0].tolist() == [2.0] * 4  # the RM ran first
    metrics: dict = {}
    attach_scores(scored, scores, extra, metrics)
    assert scored.batch["token_level_scores"] is scores
    assert scored.meta_info["reward_extra_keys"] == ["acc"] and list(scored.non_tensor_batch["acc"]) == [1.0] * 4
    assert metrics == {"reward/calls": 1.0}

    only_rm, rm_scores, _ = score_rollouts(rollouts, None, RewardModelGroup())
    assert torch.equal(rm_scores, only_rm.batch["rm_scores"])
    fresh = generate_groups(_prompts(byte_tokenizer, ["ef"]), 1, EchoEngine().generate_sequences)
    with pytest.raises(ValueError, match="no reward function and no reward model"):
        score_rollouts(fresh, None, None)


@pytest.mark.parametrize(
    "path",
    [
        "verl/trainer/ppo/ray_trainer.py",
        "verl/trainer/ppo/validation.py",
        "verl/api/rollout.py",
        "verl/api/evaluation.py",
        "verl/trainer/main_eval.py",
    ],
)
def test_callers_do_not_write_the_rollout_idiom_again(path: str) -> None:
    """No caller repeats prompts, tags uids or picks the generation keys itself: that is batch_rollout's job."""
    source = (Path(__file__).resolve().parents[3] / path).read_text()
    calls = {
        node.func.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not {"repeat", "uuid4", "generate_sequences"} & calls, path


def test_agent_columns_reach_the_engine_and_agent_reward_is_added(byte_tokenizer) -> None:
    from verl.trainer.ppo.batch_rollout import add_agent_reward

    prompts = _prompts(byte_tokenizer, ["ab", "cde"])
    prompts.non_tensor_batch["raw_prompt"] = np.array([[{"role": "user", "content": t}] for t in "xy"], dtype=object)
    prompts.non_tensor_batch["agent_name"] = np.array(["tool_agent", "single_turn_agent"], dtype=object)
    seen: list[dict] = []

    def engine(gen: DataProto) -> DataProto:
        seen.append({k: list(v) for k, v in gen.non_tensor_batch.items()})
        responses = gen.batch["input_ids"][:, -2:].clone()
        mask = torch.tensor([[1, 0], [1, 1], [1, 1], [1, 1]])[: len(gen)]
        return DataProto.from_dict(
            tensors={
                "prompts": gen.batch["input_ids"],
                "responses": responses,
                "response_mask": mask,
                "attention_mask": torch.cat([gen.batch["attention_mask"], torch.ones_like(mask)], -1),
            },
            non_tensors={**gen.non_tensor_batch, "agent_reward": np.array([0.5, 1.0, 0.0, 2.0], dtype=object)},
        )

    rollouts = generate_groups(prompts, 2, engine)
    assert seen[0]["agent_name"] == ["tool_agent", "tool_agent", "single_turn_agent", "single_turn_agent"]
    assert [m[0]["content"] for m in seen[0]["raw_prompt"]] == ["x", "x", "y", "y"]
    assert list(rollouts.non_tensor_batch["agent_name"]) == seen[0]["agent_name"]
    scores = torch.zeros(4, 2)
    scores[:, 1] = 1.0
    total = add_agent_reward(rollouts, scores)
    # added at the last token attention_mask covers (mask 0 on the first row's last token is a tool token)
    assert total.tolist() == [[0.0, 1.5], [0.0, 2.0], [0.0, 1.0], [0.0, 3.0]]
    assert scores[:, 0].sum() == 0 and add_agent_reward(_prompts(byte_tokenizer, ["a"]), scores) is scores


def test_async_rollout_mode_sends_every_prompt_through_the_agent_loops(tiny_model_dir: str) -> None:
    """``rollout.mode=async`` (upstream's AsyncLLM servers + agent loops) builds the agent loops even with
    ``multi_turn.enable=false``; rows without an ``agent_name`` run ``single_turn_agent``. ``sync`` builds none."""
    from verl.experimental.agent_loop.manager import AgentLoopManager
    from verl.models.tiny import make_byte_tokenizer
    from verl.sections.rollout import agent_loops_on
    from verl.trainer.config import load_config
    from verl.trainer.ppo.batch_rollout import make_agent_loop_manager

    base = [f"actor_rollout_ref.model.path={tiny_model_dir}", "actor_rollout_ref.rollout.name=hf"]
    sync_cfg = load_config(base)
    async_cfg = load_config([*base, "actor_rollout_ref.rollout.mode=async"])
    assert not agent_loops_on(sync_cfg.actor_rollout_ref.rollout) and agent_loops_on(
        async_cfg.actor_rollout_ref.rollout
    )
    tokenizer = make_byte_tokenizer()
    assert make_agent_loop_manager(sync_cfg, tokenizer, EchoEngine()) is None
    manager = make_agent_loop_manager(async_cfg, tokenizer, EchoEngine())
    assert isinstance(manager, AgentLoopManager)
    assert manager.runner.settings.default_agent_loop == "single_turn_agent"
    with pytest.raises(Exception, match="mode"):
        load_config([*base, "actor_rollout_ref.rollout.mode=spmd"])
