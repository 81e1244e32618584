"""The driver's pool of synchronous partial rollouts (verl/trainer/ppo/partial_rollout_pool.py)."""

from __future__ import annotations

import pytest
import torch

from verl.models.tiny import make_tiny_causal_lm
from verl.protocol import DataProto
from verl.trainer.ppo.partial_rollout_pool import PartialRolloutPool
from verl.workers.rollout.group_quota import generate_with_group_quota
from verl.workers.rollout.hf_rollout import HFRollout

PAD = 256
LENGTH = 7
PROMPTS = [b"2+3=", b"hello", b"a", b"12*7=?", b"xy", b"q"]


def _prompts(texts: list[bytes], start: int) -> DataProto:
    width = max(len(t) for t in texts)
    ids = torch.full((len(texts), width), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    pos = torch.zeros_like(ids)
    for i, t in enumerate(texts):
        ids[i, width - len(t) :] = torch.tensor(list(t))
        mask[i, width - len(t) :] = 1
        pos[i, width - len(t) :] = torch.arange(len(t))
    uids = [f"p{start + i}" for i in range(len(texts))]
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos},
        non_tensors={"uid": uids, "data_source": ["test"] * len(texts)},
    )


def _engine() -> HFRollout:
    config = {"dtype": "float32", "do_sample": False, "response_length": LENGTH, "calculate_log_probs": True}
    return HFRollout(make_tiny_causal_lm(seed=0), config)


def _run(pool: PartialRolloutPool, engine: HFRollout, batches: list[DataProto], eos: int):
    """Every step of a run: the pool topped up, generated under its quota, a batch taken; until it is empty."""
    taken, metrics, step = [], [], 0
    queue = list(batches)
    while queue or pool.groups:
        for _ in range(pool.batches_wanted()):
            if queue:
                pool.add(queue.pop(0), version=step)
        batch, order = pool.generation_batch({"eos_token_id": eos, "pad_token_id": PAD})
        out = generate_with_group_quota(engine, batch)
        rollouts, step_metrics = pool.take(out, order, version=step)
        taken.append(rollouts)
        metrics.append(step_metrics)
        step += 1
    return taken, metrics


def test_continued_responses_equal_uninterrupted_ones() -> None:
    """Greedy decoding with unchanged weights: a response interrupted and continued in later steps is the one
    generated in one go (prompt continuation, positions, budgets and the join are exact)."""
    engine = _engine()
    free = engine.generate_sequences(
        _prompts(PROMPTS, 0).__class__.from_dict(
            tensors=dict(_prompts(PROMPTS, 0).batch.items()), meta_info={"eos_token_id": PAD + 2, "pad_token_id": PAD}
        )
    )
    eos = int(free.batch["responses"][2, 1])  # prompt 2's second token ends it early: groups complete unevenly
    pool = PartialRolloutPool(n=2, batch_size=2, response_length=LENGTH, eos_token_ids=[eos], pad_token_id=PAD)
    batches = [_prompts(PROMPTS[i : i + 2], i) for i in range(0, len(PROMPTS), 2)]
    taken, metrics = _run(pool, engine, batches, eos)
    assert len(taken) == len(batches)  # one step per loader batch: the first adds two, the last drains
    assert sum(m["partial_rollout/interrupted_rows"] for m in metrics) > 0
    assert sum(m["partial_rollout/resumed_rows"] for m in metrics) > 0
    reference = engine.generate_sequences(
        DataProto.from_dict(
            tensors=dict(_prompts(PROMPTS, 0).batch.items()), meta_info={"eos_token_id": eos, "pad_token_id": PAD}
        )
    )
    seen = set()
    for rollouts in taken:
        assert len(rollouts) == 4 and rollouts.batch["responses"].shape[1] == LENGTH
        for row in range(len(rollouts)):
            uid = rollouts.non_tensor_batch["uid"][row]
            i = int(uid[1:])
            seen.add(uid)
            assert torch.equal(rollouts.batch["responses"][row], reference.batch["responses"][i]), uid
            assert torch.equal(rollouts.batch["response_mask"][row], reference.batch["response_mask"][i]), uid
            assert torch.equal(rollouts.batch["input_ids"][row, -LENGTH:], reference.batch["responses"][i])
            torch.testing.assert_close(
                rollouts.batch["rollout_log_probs"][row], reference.batch["rollout_log_probs"][i], atol=1e-4, rtol=0
            )
            assert rollouts.non_tensor_batch["data_source"][row] == "test"
    assert seen == {f"p{i}" for i in range(len(PROMPTS))}


def test_the_pool_survives_a_checkpoint_round_trip() -> None:
    engine = _engine()
    pool = PartialRolloutPool(n=2, batch_size=2, response_length=LENGTH, eos_token_ids=[PAD + 2], pad_token_id=PAD)
    pool.add(_prompts(PROMPTS[:2], 0), version=0)
    pool.add(_prompts(PROMPTS[2:4], 2), version=0)
    batch, order = pool.generation_batch({"eos_token_id": PAD + 2, "pad_token_id": PAD})
    pool.take(generate_with_group_quota(engine, batch), order, version=0)
    state = pool.state_dict()
    torch.save(state, "/dev/null")  # tensors and plain values only
    other = PartialRolloutPool(n=2, batch_size=2, response_length=LENGTH, eos_token_ids=[PAD + 2], pad_token_id=PAD)
    other.load_state_dict(state)
    assert other.groups == pool.groups == 2
    for key in pool.rows.batch.keys():
        assert torch.equal(other.rows.batch[key], pool.rows.batch[key]), key
    assert list(other.rows.non_tensor_batch["uid"]) == list(pool.rows.non_tensor_batch["uid"])


def test_a_batch_that_is_not_the_step_size_is_refused() -> None:
    pool = PartialRolloutPool(n=2, batch_size=2, response_length=LENGTH, eos_token_ids=[PAD + 2], pad_token_id=PAD)
    with pytest.raises(ValueError, match="expected data.train_batch_size=2"):
        pool.add(_prompts(PROMPTS[:3], 0), version=0)
    pool.add(_prompts(PROMPTS[:2], 0), version=0)
    with pytest.raises(ValueError, match="do not split over 4 ranks"):
        pool.generation_batch({}, ranks=4)
