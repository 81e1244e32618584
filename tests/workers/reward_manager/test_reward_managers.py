"""Reward managers on hand-built DataProto batches: score placement, extra info, dapo penalty, error handling."""

from __future__ import annotations

import math
import os
import sys
import threading
import time

import cloudpickle
import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.workers.reward_manager import (
    AbstractRewardManager,
    BatchRewardManager,
    DAPORewardManager,
    NaiveRewardManager,
    RewardComputationError,
    get_reward_manager_cls,
    register,
)

# Reward worker processes get this module's functions by value: they need not import it (nor torch, pytest).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

PROMPT_LEN = 6
RESP_LEN = 8


def make_batch(tok, prompts, responses, ground_truths, sources=None, with_response_mask=True) -> DataProto:
    """Left-padded prompts, right-padded responses (bytes + EOS, cut at RESP_LEN), verl's batch layout."""
    pad, eos = tok.pad_token_id, tok.eos_token_id
    bs = len(prompts)
    p_ids = torch.full((bs, PROMPT_LEN), pad)
    r_ids = torch.full((bs, RESP_LEN), pad)
    mask = torch.zeros((bs, PROMPT_LEN + RESP_LEN), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        pb = list(p.encode())
        rb = (list(r.encode()) + [eos])[:RESP_LEN]
        p_ids[i, PROMPT_LEN - len(pb) :] = torch.tensor(pb)
        r_ids[i, : len(rb)] = torch.tensor(rb)
        mask[i, PROMPT_LEN - len(pb) : PROMPT_LEN] = 1
        mask[i, PROMPT_LEN : PROMPT_LEN + len(rb)] = 1
    tensors = {
        "prompts": p_ids,
        "responses": r_ids,
        "input_ids": torch.cat([p_ids, r_ids], dim=1),
        "attention_mask": mask,
    }
    if with_response_mask:
        tensors["response_mask"] = mask[:, PROMPT_LEN:].clone()
    non_tensors = {
        "data_source": sources or ["arithmetic"] * bs,
        "reward_model": [{"style": "rule", "ground_truth": g} for g in ground_truths],
        "extra_info": [{"index": i} for i in range(bs)],
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def test_naive_places_score_at_last_valid_token(byte_tokenizer):
    data = make_batch(byte_tokenizer, ["1+1", "2+5", "q"], ["2", "it is 8", "too long answer"], ["2", "7", "9"])
    out = NaiveRewardManager(byte_tokenizer, num_examine=0)(data, return_dict=True)
    expected = torch.zeros(3, RESP_LEN)
    expected[0, 1] = 1.0  # "2" + EOS: 2 valid tokens, last at index 1
    # row 1 ("it is 8" + EOS = 8 tokens) scores 0.0 at index 7; row 2 is cut at RESP_LEN (no EOS): 0.0 at index 7
    assert torch.equal(out["reward_tensor"], expected)
    assert out["reward_extra_info"] == {}
    assert torch.equal(NaiveRewardManager(byte_tokenizer, 0)(data), expected)


def test_naive_without_response_mask_uses_attention_mask(byte_tokenizer):
    data = make_batch(byte_tokenizer, ["a"], ["12"], ["12"], with_response_mask=False)
    reward = NaiveRewardManager(byte_tokenizer, 0)(data)
    assert reward[0, 2].item() == 1.0 and reward.sum().item() == 1.0


def test_naive_passes_decoded_strings_and_collects_extras(byte_tokenizer):
    calls = []

    def fn(data_source, solution_str, ground_truth, extra_info=None):
        calls.append((data_source, solution_str, ground_truth, extra_info))
        if solution_str == "b":
            return 0.5  # no extras for this one
        return {"score": 2.0, "acc": True, "pred": solution_str}

    data = make_batch(byte_tokenizer, ["p1", "p2"], ["a", "b"], ["x", "y"], sources=["s1", "s2"])
    out = NaiveRewardManager(byte_tokenizer, 0, compute_score=fn)(data, return_dict=True)
    assert calls == [("s1", "a", "x", {"index": 0}), ("s2", "b", "y", {"index": 1})]  # EOS stripped
    info = out["reward_extra_info"]
    assert info["acc"][0] is True and math.isnan(info["acc"][1])
    assert info["pred"][0] == "a" and math.isnan(info["pred"][1])
    assert out["reward_tensor"][0, 1].item() == 2.0 and out["reward_tensor"][1, 1].item() == 0.5


def test_an_agent_loop_trajectory_gives_the_scorer_its_turns(byte_tokenizer):
    """As upstream's managers: extra_info gets num_turns and rollout_reward_scores after agent loops (verl-recipe's
    ReTool scorer rewards tool calls by num_turns); the batch's own extra_info rows are not changed."""
    seen = []

    def fn(data_source, solution_str, ground_truth, extra_info=None):
        seen.append(extra_info)
        return 0.0

    data = make_batch(byte_tokenizer, ["p1", "p2"], ["a", "b"], ["x", "y"])
    data.non_tensor_batch["agent_metrics"] = np.array([{"num_turns": 4}, {"num_turns": 2}], dtype=object)
    NaiveRewardManager(byte_tokenizer, 0, compute_score=fn)(data)
    assert seen == [
        {"index": 0, "num_turns": 4, "rollout_reward_scores": {}},
        {"index": 1, "num_turns": 2, "rollout_reward_scores": {}},
    ]
    assert data.non_tensor_batch["extra_info"][0] == {"index": 0}


def test_reward_fn_key_and_num_examine(byte_tokenizer, capsys):
    data = make_batch(byte_tokenizer, ["p", "p", "p"], ["1", "2", "3"], ["1", "2", "3"])
    data.non_tensor_batch["task"] = np.array(["arithmetic"] * 3, dtype=object)
    data.non_tensor_batch["data_source"] = np.array(["unknown"] * 3, dtype=object)
    reward = NaiveRewardManager(byte_tokenizer, num_examine=2, reward_fn_key="task")(data)
    assert reward.sum().item() == 3.0
    printed = capsys.readouterr().out
    assert printed.count("[response]") == 2 and "[ground_truth] 1" in printed and "[score] 1.0" in printed
    with pytest.raises(KeyError, match="'missing'"):
        NaiveRewardManager(byte_tokenizer, 0, reward_fn_key="missing")(data)


def test_rm_scores_are_used_when_present(byte_tokenizer):
    data = make_batch(byte_tokenizer, ["p"], ["1"], ["1"])
    rm = torch.full((1, RESP_LEN), 0.25)
    data.batch["rm_scores"] = rm

    def never(**kwargs):
        raise AssertionError("compute_score must not run when rm_scores exist")

    out = NaiveRewardManager(byte_tokenizer, 0, compute_score=never)(data, return_dict=True)
    assert torch.equal(out["reward_tensor"], rm) and out["reward_extra_info"] == {}


def test_batch_manager_single_call(byte_tokenizer):
    calls = []

    def batch_fn(data_sources, solution_strs, ground_truths, extra_infos):
        calls.append((list(data_sources), list(solution_strs), list(ground_truths)))
        return [{"score": float(s == g), "len": len(s)} for s, g in zip(solution_strs, ground_truths)]

    data = make_batch(byte_tokenizer, ["p", "q"], ["7", "nope"], ["7", "3"])
    out = BatchRewardManager(byte_tokenizer, 0, compute_score=batch_fn)(data, return_dict=True)
    assert calls == [(["arithmetic", "arithmetic"], ["7", "nope"], ["7", "3"])]
    assert out["reward_tensor"][0, 1].item() == 1.0 and out["reward_tensor"][1].sum().item() == 0.0
    assert out["reward_extra_info"] == {"len": [1, 4]}
    # default: default_compute_score looped per sample
    assert BatchRewardManager(byte_tokenizer, 0)(data)[0, 1].item() == 1.0


def test_batch_manager_wrong_length_and_item_errors(byte_tokenizer):
    data = make_batch(byte_tokenizer, ["p", "q"], ["1", "2"], ["1", "2"])
    short = BatchRewardManager(byte_tokenizer, 0, compute_score=lambda **kw: [1.0])
    with pytest.raises(RewardComputationError, match="returned 1 results for 2 samples"):
        short(data)
    mixed = BatchRewardManager(
        byte_tokenizer, 0, compute_score=lambda **kw: [1.0, RuntimeError("remote down")], on_error="zero"
    )
    out = mixed(data, return_dict=True)
    assert out["reward_tensor"][0, 1].item() == 1.0 and out["reward_tensor"][1].sum().item() == 0.0
    assert out["reward_extra_info"]["reward_error"] == [0, 1]
    assert out["reward_extra_info"]["reward/num_errors"] == [1]


def test_dapo_overlong_penalty_numbers(byte_tokenizer):
    # max_resp_len 8, buffer 4: no penalty up to 4 tokens, then -(len - 4) / 4 * factor
    cfg = {"enable": True, "len": 4, "penalty_factor": 0.5, "log": True}
    manager = DAPORewardManager(byte_tokenizer, 0, max_resp_len=RESP_LEN, overlong_buffer_cfg=cfg)
    # valid lengths (text + EOS): 2, 5, 7, 8 (cut)
    data = make_batch(byte_tokenizer, ["p"] * 4, ["1", "1234", "123456", "1234567890"], ["1", "1234", "0", "0"])
    out = manager(data, return_dict=True)
    penalties = [0.0, -(5 - 4) / 4 * 0.5, -(7 - 4) / 4 * 0.5, -(8 - 4) / 4 * 0.5]
    scores = [1.0, 1.0, 0.0, 0.0]
    lengths = [2, 5, 7, 8]
    for i in range(4):
        assert out["reward_tensor"][i, lengths[i] - 1].item() == pytest.approx(scores[i] + penalties[i])
        assert out["reward_tensor"][i].sum().item() == pytest.approx(scores[i] + penalties[i])
    info = out["reward_extra_info"]
    assert info["overlong_reward"] == pytest.approx(penalties)
    assert info["overlong"] == [False, True, True, True]
    assert info["acc"] == [1.0, 1.0, 0.0, 0.0]
    off = DAPORewardManager(byte_tokenizer, 0, max_resp_len=RESP_LEN, overlong_buffer_cfg={"enable": False})
    assert off(data)[1, 4].item() == 1.0
    with pytest.raises(ValueError, match="max_resp_len"):
        DAPORewardManager(byte_tokenizer, 0, overlong_buffer_cfg={"enable": True, "len": 4})


def _raising(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "bad":
        raise ZeroDivisionError("division by zero in scorer")
    return 1.0


def _nan(data_source, solution_str, ground_truth, extra_info=None):
    return float("nan") if solution_str == "bad" else 1.0


def _none(data_source, solution_str, ground_truth, extra_info=None):
    return None if solution_str == "bad" else 1.0


def _hang(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "bad":
        time.sleep(60)
    return 1.0


@pytest.mark.parametrize(
    "fn, message",
    [
        (_raising, "ZeroDivisionError: division by zero in scorer"),
        (_nan, "non-finite score nan"),
        (_none, "returned None"),
        (_hang, "did not return within 1s"),
    ],
)
@pytest.mark.parametrize("manager_cls", [NaiveRewardManager, DAPORewardManager])
def test_on_error_fail_and_zero(byte_tokenizer, fn, message, manager_cls):
    data = make_batch(byte_tokenizer, ["p", "q", "r"], ["ok", "bad", "ok"], ["1", "2", "3"])
    failing = manager_cls(byte_tokenizer, 0, compute_score=fn, on_error="fail", timeout_s=1.0)
    start = time.monotonic()
    with pytest.raises(RewardComputationError, match=r"sample 1 \(data_source='arithmetic'\) failed: .*" + message):
        failing(data)
    assert time.monotonic() - start < 10  # worker start + the 1 s limit, not the 60 s the function wants
    zero = manager_cls(byte_tokenizer, 0, compute_score=fn, on_error="zero", timeout_s=1.0)
    out = zero(data, return_dict=True)
    assert out["reward_tensor"].sum(-1).tolist() == [1.0, 0.0, 1.0]
    assert out["reward_extra_info"]["reward_error"] == [0, 1, 0]
    assert out["reward_extra_info"]["reward/num_errors"] == [1]
    failing.close()
    zero.close()


def test_score_type_checks(byte_tokenizer):
    data = make_batch(byte_tokenizer, ["p"], ["x"], ["1"])
    for bad, pattern in [({"acc": 1}, "without 'score'"), ("1.0", "must be a number"), (torch.ones(2), "one element")]:
        manager = NaiveRewardManager(byte_tokenizer, 0, compute_score=lambda bad=bad, **kw: bad)
        with pytest.raises(RewardComputationError, match=pattern):
            manager(data)
    ok = NaiveRewardManager(byte_tokenizer, 0, compute_score=lambda **kw: np.float32(0.5))
    assert ok(data).sum().item() == 0.5


def test_registry_and_constructor_checks(byte_tokenizer):
    assert get_reward_manager_cls("naive") is NaiveRewardManager
    assert get_reward_manager_cls("batch") is BatchRewardManager
    assert get_reward_manager_cls("dapo") is DAPORewardManager
    names = r"\['batch', 'dapo', 'gdpo', 'judge', 'naive', 'prime'"
    with pytest.raises(ValueError, match=r"^Unknown reward manager: nope\. .*" + names):
        get_reward_manager_cls("nope")

    @register("constant_test")
    class Constant(AbstractRewardManager):
        def score_samples(self, samples):
            return [3.0] * len(samples)

    assert get_reward_manager_cls("constant_test") is Constant
    data = make_batch(byte_tokenizer, ["p"], ["x"], ["1"])
    assert Constant(byte_tokenizer, 0)(data)[0, 1].item() == 3.0
    with pytest.raises(ValueError, match="Reward manager naive has already been registered"):
        register("naive")(Constant)
    with pytest.raises(TypeError, match=r"unknown arguments \['bogus'\]"):
        NaiveRewardManager(byte_tokenizer, 0, bogus=1)
    with pytest.raises(ValueError, match="on_error"):
        NaiveRewardManager(byte_tokenizer, 0, on_error="ignore")


def _exits(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "bad":
        sys.exit(3)
    return 1.0


def _huge(data_source, solution_str, ground_truth, extra_info=None):
    return 1e300 if solution_str == "bad" else 1.0


def _crashes(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "bad":
        os._exit(9)
    return 1.0


def _spins(data_source, solution_str, ground_truth, extra_info=None):
    while solution_str == "bad":
        pass
    return 1.0


@pytest.mark.parametrize(
    "fn, message, num_workers",
    [
        (_exits, r"SystemExit\(3\) \(sys.exit called\)", 0),
        (_exits, r"SystemExit\(3\) \(sys.exit called\)", 1),
        (_huge, "1e\\+300, beyond the float32 range", 0),
        (_crashes, r"worker process died \(status 9\)", 1),
    ],
)
def test_exit_overflow_and_crash_are_per_sample_errors(byte_tokenizer, fn, message, num_workers):
    data = make_batch(byte_tokenizer, ["p", "q", "r"], ["ok", "bad", "ok"], ["1", "2", "3"], sources=["a", "b", "c"])
    zero = NaiveRewardManager(byte_tokenizer, 0, compute_score=fn, on_error="zero", num_workers=num_workers)
    out = zero(data, return_dict=True)
    assert out["reward_tensor"].sum(-1).tolist() == [1.0, 0.0, 1.0]
    assert out["reward_extra_info"]["reward_error"] == [0, 1, 0]
    failing = NaiveRewardManager(byte_tokenizer, 0, compute_score=fn, num_workers=num_workers)
    with pytest.raises(RewardComputationError, match=r"sample 1 \(data_source='b'\) failed: .*" + message):
        failing(data)
    zero.close()
    failing.close()


def test_stuck_samples_are_killed_and_bounded_by_the_batch_deadline(byte_tokenizer):
    data = make_batch(byte_tokenizer, ["p"] * 6, ["bad"] * 5 + ["ok"], ["1"] * 6)
    manager = NaiveRewardManager(
        byte_tokenizer, 0, compute_score=_spins, on_error="zero", timeout_s=30.0, batch_timeout_s=1.0, num_workers=2
    )
    try:
        manager(data[-1:])  # start the workers; time the stuck batch alone
        before = set(manager._pool.worker_pids())
        start = time.monotonic()
        out = manager(data, return_dict=True)
        # 5 stuck samples x 30 s one after another would be 150 s; the batch deadline ends it at 1 s
        assert time.monotonic() - start < 6
        assert out["reward_extra_info"]["reward/num_errors"][0] >= 5
        # the spinning workers were killed (not abandoned) and replaced
        assert not before & set(manager._pool.worker_pids())
        for pid in before:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        manager.close()


def test_worker_settings_are_checked(byte_tokenizer):
    with pytest.raises(ValueError, match="num_workers=0 runs the reward function in the trainer process"):
        NaiveRewardManager(byte_tokenizer, 0, timeout_s=5.0, num_workers=0)
    with pytest.raises(ValueError, match="num_workers must be >= 0"):
        NaiveRewardManager(byte_tokenizer, 0, num_workers=-1)
    lock = threading.Lock()
    with pytest.raises(TypeError, match="cannot be sent to worker processes"):
        NaiveRewardManager(byte_tokenizer, 0, compute_score=lambda **kw: lock.locked(), timeout_s=1.0)
    assert NaiveRewardManager(byte_tokenizer, 0).num_workers == 0  # no limit: nothing to kill, in process
    assert NaiveRewardManager(byte_tokenizer, 0, timeout_s=1.0).num_workers >= 1
