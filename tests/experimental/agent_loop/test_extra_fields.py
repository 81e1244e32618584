"""``AgentLoopOutput.extra_fields`` reach the rollout batch as columns with a stable schema (the same columns whatever
loops produced a batch) and the reward function's ``extra_info``; ``as_dict`` and upstream's ``AgentLoopMetrics``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verl.experimental.agent_loop.agent_loop import (
    AGENT_LOOPS,
    STABLE_EXTRA_FIELDS,
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
)
from verl.experimental.agent_loop.runner import extra_field_columns
from verl.experimental.reward_loop.reward_manager.base import decode_last_response
from verl.protocol import DataProto


def _output(**extra: Any) -> AgentLoopOutput:
    return AgentLoopOutput(prompt_ids=[1, 2], response_ids=[3], response_mask=[1], extra_fields=dict(extra))


def test_as_dict_copies_the_fields_and_promotes_the_teacher_fields() -> None:
    out = _output(raw="x", teacher_ids=[7, 8], teacher_logprobs=[-0.1, -0.2])
    fields = out.as_dict()
    assert fields["teacher_ids"] == [7, 8] and fields["teacher_logprobs"] == [-0.1, -0.2]
    assert fields["extra_fields"] == {"raw": "x"} and fields["prompt_ids"] == [1, 2]
    assert out.extra_fields == {"raw": "x", "teacher_ids": [7, 8], "teacher_logprobs": [-0.1, -0.2]}
    fields["prompt_ids"].append(9)
    assert out.prompt_ids == [1, 2]
    plain = AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1])
    plain.extra_fields["k"] = 1  # the default dict is the output's own
    assert plain.as_dict()["extra_fields"] == {"k": 1} and _output().extra_fields == {}


def test_agent_loop_metrics_become_the_metrics_dict() -> None:
    metrics = AgentLoopMetrics(generate_sequences=1.5, tool_calls=0.25, num_preempted=2)
    out = AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], metrics=metrics)
    assert out.metrics == {"generate_s": 1.5, "tool_s": 0.25, "compute_score_s": 0.0, "num_preempted": 2}
    with pytest.raises(TypeError, match="metrics must be a dict or AgentLoopMetrics"):
        AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], metrics=[1])
    with pytest.raises(TypeError, match="extra_fields must be a dict"):
        AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], extra_fields=[1])


def test_extra_field_columns_have_a_stable_schema() -> None:
    outs = [_output(turn_scores=[0.5, 1.0], tool_rewards=[0.1, 0.2], my_key="a"), _output(turn_scores=[0.0, 0.0])]
    columns = extra_field_columns(outs)
    assert set(columns) == {*STABLE_EXTRA_FIELDS, "my_key", "tool_extra_fields"}
    assert all(c.dtype == object and c.shape == (2,) for c in columns.values())
    # equal-length lists stay one list per row (no 2-D broadcast)
    assert columns["turn_scores"][0] == [0.5, 1.0] and columns["turn_scores"][1] == [0.0, 0.0]
    assert columns["tool_rewards"][1] is None and columns["my_key"].tolist() == ["a", None]
    assert columns["extras"].tolist() == [None, None]
    assert columns["tool_extra_fields"][1] == {"turn_scores": [0.0, 0.0]}
    for reserved in ("agent_metrics", "raw_prompt", "session_id", "tool_extra_fields"):
        with pytest.raises(ValueError, match=f"extra_fields key '{reserved}' is reserved"):
            extra_field_columns([_output(**{reserved: 1})])


class _TaggingLoop(AgentLoopBase):
    """One generation; records the answer's length and a tag as extra fields (what a recipe's loop does)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        out = await self.server.generate(list(kwargs["prompt_ids"]), self.settings.response_length)
        return AgentLoopOutput(
            prompt_ids=list(kwargs["prompt_ids"]),
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            extra_fields={"answer_len": len(out.token_ids), "tag": f"row{kwargs['index']}"},
        )


def test_a_recipe_loops_extra_fields_reach_the_batch_and_the_reward_extra_info(tok, kit, monkeypatch) -> None:
    monkeypatch.setitem(AGENT_LOOPS.entries, "tagging_agent", _TaggingLoop)
    engine = kit.ScriptedEngine(tok, {"Q1": ["ab"], "Q2": ["abcd"]})
    config = kit.rollout_config(agent_default_agent_loop="single_turn_agent")
    batch = kit.prompt_batch(tok, ["Q1", "Q2"])
    batch.non_tensor_batch["agent_name"] = np.array(["tagging_agent", "single_turn_agent"], dtype=object)
    out = kit.run(tok, engine, config, batch)
    ntb = out.non_tensor_batch
    assert ntb["answer_len"].tolist() == [3, None] and ntb["tag"].tolist() == ["row0", None]  # "ab" + EOS
    assert ntb["turn_scores"].tolist() == [None, []] and ntb["tool_rewards"].tolist() == [None, []]
    # a batch of the single-turn loop alone has the stable columns too, so the two concatenate
    alone = kit.run(tok, engine, config, kit.prompt_batch(tok, ["Q1"]))
    assert set(STABLE_EXTRA_FIELDS) <= set(alone.non_tensor_batch)
    alone.non_tensor_batch.update({k: np.array([None], dtype=object) for k in ("answer_len", "tag")})
    both = DataProto.concat([out, alone])
    assert both.non_tensor_batch["turn_scores"].tolist() == [None, [], []]
    # the reward function's extra_info holds the row's extra fields
    row = out.select_idxs([0])
    row.non_tensor_batch["data_source"] = np.array(["demo"], dtype=object)
    row.non_tensor_batch["reward_model"] = np.array([{"ground_truth": "x"}], dtype=object)
    row.non_tensor_batch["extra_info"] = np.array([{"split": "train"}], dtype=object)
    _, _, kwargs = decode_last_response(tok, row)
    assert kwargs["extra_info"] == {"split": "train", "answer_len": 3, "tag": "row0"}
