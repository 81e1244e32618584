"""``RolloutWorker`` and ``ReplayBuffer`` as dataflow stages: the buffer keeps scored rollouts, serves mini-batches
for several updates, and honours its size and off-policy age limits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl import PPOTrainer, ReplayBuffer, RewardModel, RolloutWorker
from verl.api.models import Actor
from verl.models.tiny import make_tiny_causal_lm
from verl.protocol import DataProto

CONFIG = {
    "batch_size": 2,
    "num_samples": 2,
    "max_new_tokens": 4,
    "lr": 1e-2,
    "actor_rollout_ref.actor.dtype": "float32",
    "actor_rollout_ref.rollout.dtype": "float32",
}
REWARD = RewardModel(lambda prompts, responses: [float(sum(map(ord, r)) % 7) for r in responses])


def _trainer(tok, tmp_path, name: str) -> PPOTrainer:
    torch.manual_seed(0)
    actor = Actor(make_tiny_causal_lm(tokenizer=tok), tok)
    cfg = {**CONFIG, "trainer.default_local_dir": str(tmp_path / name)}
    return PPOTrainer(actor_model=actor, tokenizer=tok, config=cfg, reward_fn=REWARD)


def _scored(n_groups: int, per_group: int, prompt_len: int, resp_len: int = 3, start: int = 0) -> DataProto:
    """A synthetic scored rollout batch: ``n_groups`` uids of ``per_group`` rows, prompts left-padded."""
    rows = n_groups * per_group
    prompts = torch.arange(rows * prompt_len).reshape(rows, prompt_len) % 50 + 1
    responses = torch.full((rows, resp_len), 7)
    mask = torch.ones(rows, prompt_len + resp_len, dtype=torch.long)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": mask,
            "position_ids": torch.arange(prompt_len + resp_len).expand(rows, -1).clone(),
            "response_mask": torch.ones(rows, resp_len),
            "token_level_scores": torch.arange(rows, dtype=torch.float32).unsqueeze(-1).expand(rows, resp_len) + start,
        },
        non_tensors={"uid": np.array([f"g{start + i // per_group}" for i in range(rows)], dtype=object)},
    )


def test_buffer_limits_and_padding():
    buf = ReplayBuffer(capacity=8, batch_size=2, max_age=1)
    buf.add(_scored(2, 2, prompt_len=3), version=0)
    buf.add(_scored(2, 2, prompt_len=5, start=10), version=1)
    assert len(buf) == 8 and buf.num_groups == 4 and buf.ages(1) == [1, 1, 0, 0]
    buf.add(_scored(1, 2, prompt_len=4, start=20), version=2)  # over capacity: the oldest group goes
    assert len(buf) == 8 and buf.ages(2) == [2, 1, 1, 0]
    batch = buf.sample(3, global_steps=2, pad_token_id=0)  # age 2 > max_age: dropped before serving
    assert buf.ages(2) == [1, 1, 0] and len(batch) == 6
    assert batch.batch["prompts"].shape == (6, 5) and batch.batch["input_ids"].shape == (6, 8)
    assert set(batch.non_tensor_batch["uid"]) == {"g10", "g11", "g20"}  # whole groups only
    # the 4-token prompts got 1 pad column on the left, masked out, and keep their tokens and responses
    short = [i for i in range(6) if batch.non_tensor_batch["uid"][i] == "g20"]
    assert len(short) == 2
    for i in short:
        assert batch.batch["attention_mask"][i, 0] == 0 and batch.batch["attention_mask"][i, 1:].sum() == 7
        assert batch.batch["input_ids"][i, 0] == 0 and batch.batch["input_ids"][i, 1:5].tolist() != [0] * 4
    assert torch.equal(batch.batch["responses"], torch.full((6, 3), 7))
    assert batch.meta_info["stage_metrics"]["replay/age/max"] == 1.0
    with pytest.raises(ValueError, match="needs 4 .batch_size."):
        buf.sample(4, global_steps=2, pad_token_id=0)
    with pytest.raises(ValueError, match="capacity=8 sequences cannot hold"):
        buf.add(_scored(5, 2, prompt_len=3), version=3)
    with pytest.raises(ValueError, match="token_level_scores"):
        buf.add(DataProto.from_dict(tensors={"x": torch.zeros(2, 1)}), version=0)
    with pytest.raises(ValueError, match="max_age=-1"):
        ReplayBuffer(capacity=4, max_age=-1)


def test_on_policy_buffer_equals_the_plain_pipeline(byte_tokenizer, tmp_path):
    plain = _trainer(byte_tokenizer, tmp_path, "plain")
    buffered = _trainer(byte_tokenizer, tmp_path, "buffered")
    flow = plain.actor_model.sample() >> REWARD.score() >> plain.update()
    buffer = ReplayBuffer(capacity=4, max_age=0)  # holds one run, on-policy: the buffer changes nothing
    buffered_flow = buffered.actor_model.sample() >> REWARD.score() >> buffer >> buffered.update()
    assert repr(buffered_flow) == "sample() >> score() >> replay() >> update()"
    for _ in range(2):
        a, b = flow.run(["ab", "cd"]), buffered_flow.run(["ab", "cd"])
        assert a["actor/pg_loss"] == pytest.approx(b["actor/pg_loss"], abs=1e-7)
        assert b["replay/age/max"] == 0.0
    for p, q in zip(plain.actor_model.parameters(), buffered.actor_model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    plain.close()
    buffered.close()


def test_buffer_serves_several_updates_per_rollout(byte_tokenizer, tmp_path):
    trainer = _trainer(byte_tokenizer, tmp_path, "replay")
    actor = trainer.actor_model
    rollout = RolloutWorker(actor, n=2)
    assert isinstance(actor.sample(), RolloutWorker)
    buffer = ReplayBuffer(capacity=12, batch_size=2, max_age=2, updates_per_step=3, seed=1)
    flow = rollout >> REWARD.score() >> buffer >> trainer.update()
    ages = []
    for run in range(3):
        metrics = flow.run(["ab", "cd"])
        assert trainer.global_steps == 3 * (run + 1)  # one training step per served mini-batch
        ages.append(metrics["replay/age/max"])
        assert metrics["replay/age/max"] <= 2 and len(buffer) <= 12
    assert len(trainer.history) == 9 and [m["step"] for m in trainer.history] == list(range(1, 10))
    assert buffer.served == 9 and max(ages) > 0  # older rollouts were reused
    # everything still held is within the age limit of the policy that made the last update
    assert max(buffer.ages(trainer.global_steps)) <= 2 + 1
    trainer.close()
