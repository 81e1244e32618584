"""The group quota of a synchronous partial rollout's generation call (verl/workers/rollout/group_quota.py)."""

from __future__ import annotations

import pytest
import torch

from verl.models.tiny import make_tiny_causal_lm
from verl.workers.rollout.group_quota import GroupQuota, generate_with_group_quota
from verl.workers.rollout.hf_rollout import HFRollout


def _step(hook: GroupQuota, step: int, finished: list[bool], start: int = 0) -> list[bool]:
    rows = slice(start, start + len(finished))
    tokens = torch.zeros(len(finished), dtype=torch.long)
    return hook(step, rows, tokens, torch.tensor(finished)).tolist()


def test_rows_end_at_their_budget_and_the_quota_interrupts_the_rest() -> None:
    # groups of 2: group 0 has 3 tokens left, group 1 had nothing left, group 2 has 5
    hook = GroupQuota(torch.tensor([3, 3, 0, 0, 5, 5]), group_size=2, quota=2)
    assert not hook.reached
    # group 1's rows stop at their first token (their output is discarded), the others run
    assert _step(hook, 0, [False] * 6) == [False, False, True, True, False, False]
    assert _step(hook, 1, [False] * 6) == [False, False, True, True, False, False]
    # step 2: group 0 reaches its budget: with group 1 that is the quota, so group 2 is interrupted there
    assert _step(hook, 2, [False] * 6) == [True] * 6
    assert hook.interrupted.tolist() == [False, False, False, False, True, True]
    assert hook.finish_step.tolist() == [2, 2, -1, -1, 2, 2]


def test_an_eos_ends_a_row_and_a_later_micro_batch_stops_at_once() -> None:
    hook = GroupQuota(torch.tensor([9, 9, 9, 9]), group_size=2, quota=1)
    assert _step(hook, 0, [True, False], start=0) == [True, False]  # row 0 ended with EOS
    assert _step(hook, 3, [False, True], start=0) == [True, True]  # row 1 too: group 0 done, the quota reached
    assert _step(hook, 0, [False, False], start=2) == [True, True]  # the next micro-batch stops at its first token
    assert hook.interrupted.tolist() == [False, False, True, True]
    assert hook.finish_step.tolist() == [0, 3, 0, 0]


def test_bad_quotas_are_refused() -> None:
    with pytest.raises(ValueError, match="whole groups"):
        GroupQuota(torch.tensor([1, 1, 1]), group_size=2, quota=1)
    with pytest.raises(ValueError, match="out of range"):
        GroupQuota(torch.tensor([1, 1]), group_size=2, quota=2)


def test_the_hf_engine_stops_at_the_quota(make_prompts) -> None:
    rollout = HFRollout(make_tiny_causal_lm(seed=0), {"dtype": "float32", "do_sample": False, "response_length": 6})
    prompts = make_prompts([list(b"ab"), list(b"ab"), list(b"xyz"), list(b"xyz")])
    prompts.batch["token_budget"] = torch.tensor([2, 2, 6, 6])
    prompts.meta_info.update({"group_quota": 1, "group_size": 2})
    out = generate_with_group_quota(rollout, prompts)
    assert "token_budget" not in prompts.batch.keys()
    assert out.batch["response_mask"].sum(-1).tolist() == [2, 2, 2, 2]  # group 1 stopped with group 0's budget
    assert out.batch["partial_interrupted"].tolist() == [False, False, True, True]
    plain = prompts.select(batch_keys=["input_ids", "attention_mask", "position_ids"])
    plain.meta_info = {k: v for k, v in prompts.meta_info.items() if k not in ("group_quota", "group_size")}
    assert generate_with_group_quota(rollout, plain) is None  # no quota asked: the caller generates plainly
