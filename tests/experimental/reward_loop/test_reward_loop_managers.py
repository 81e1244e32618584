"""verl.experimental.reward_loop: the token bucket, the rate-limited / naive / dapo reward-loop managers."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl import DataProto
from verl.experimental.reward_loop.reward_manager import (
    AsyncTokenBucket,
    DAPORewardManager,
    NaiveRewardManager,
    RateLimitedRewardManager,
    get_reward_manager_cls,
)


class _Tok:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(int(i)) for i in ids)


def _data(responses: list[list[int]], lengths: list[int], truths: list[str]) -> DataProto:
    resp = torch.tensor(responses)
    mask = (torch.arange(resp.shape[1])[None, :] < torch.tensor(lengths)[:, None]).long()
    return DataProto.from_dict(
        tensors={"responses": resp, "attention_mask": torch.cat([torch.ones_like(resp), mask], dim=1)},
        non_tensors={
            "data_source": np.array(["t"] * len(truths), dtype=object),
            "reward_model": np.array([{"ground_truth": g} for g in truths], dtype=object),
        },
    )


def _exact(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str == ground_truth)


@pytest.fixture(autouse=True)
def _fresh_limits():
    for attr in ("_semaphore", "_rpm_limiter", "_tpm_limiter"):
        setattr(RateLimitedRewardManager, attr, None)
    RateLimitedRewardManager._class_initialized = False
    yield
    RateLimitedRewardManager._class_initialized = False


def test_token_bucket_waits_for_refill_and_allows_debt():
    async def run():
        bucket = AsyncTokenBucket(rate_limit=100.0, max_tokens=10.0)
        await bucket.acquire(10.0)
        t0 = time.monotonic()
        await bucket.acquire(5.0)  # 5 tokens at 100/s: ~0.05 s
        waited = time.monotonic() - t0
        t0 = time.monotonic()
        await bucket.acquire(20.0)  # beyond capacity: waits (20 - balance) / rate, then owes nothing more
        big = time.monotonic() - t0
        return waited, big, bucket.tokens

    waited, big, tokens = asyncio.run(run())
    assert 0.03 < waited < 0.2
    assert 0.15 < big < 0.4
    assert tokens <= 1.0
    with pytest.raises(ValueError, match="rate_limit"):
        AsyncTokenBucket(rate_limit=0)


def test_rate_limited_rpm_spaces_calls_and_scores():
    config = OmegaConf.create({"reward": {"max_concurrent": 4, "max_rpm": 1200, "timeout": 5.0}})  # 20/s, burst 20
    manager = RateLimitedRewardManager(config, _Tok(), _exact)
    data = _data([[1, 2, 0]], [2], ["1 2"])

    async def run():
        t0 = time.monotonic()
        results = await asyncio.gather(*(manager.run_single(data) for _ in range(24)))
        return results, time.monotonic() - t0

    results, elapsed = asyncio.run(run())
    assert all(r["reward_score"] == 1.0 and r["reward_extra_info"] == {"acc": 1.0} for r in results)
    assert 0.15 < elapsed < 1.0  # 4 calls past the burst of 20 at 20/s


def test_rate_limited_timeout_and_error_score_zero():
    async def slow(**kwargs):
        await asyncio.sleep(1.0)
        return 1.0

    def broken(**kwargs):
        raise RuntimeError("api down")

    config = {"reward": {"max_concurrent": 2, "timeout": 0.05}}
    data = _data([[1]], [1], ["1"])
    out = asyncio.run(RateLimitedRewardManager(config, _Tok(), slow).run_single(data))
    assert out == {"reward_score": 0.0, "reward_extra_info": {"timeout": True, "acc": 0.0}}
    out = asyncio.run(RateLimitedRewardManager(config, _Tok(), broken).run_single(data))
    assert out["reward_score"] == 0.0 and out["reward_extra_info"]["error"] == "api down"
    with pytest.raises(ValueError, match="reward.max_concurrent"):
        RateLimitedRewardManager._class_initialized = False
        RateLimitedRewardManager({"reward": {"max_concurrent": 0}}, _Tok(), broken)
    with pytest.raises(ValueError, match="reward_router_address"):
        RateLimitedRewardManager(config, _Tok(), broken, reward_router_address="http://x")


def test_batch_call_places_scores_at_last_valid_token():
    def scored(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": 2.0 if solution_str == ground_truth else -1.0, "len": len(solution_str.split())}

    manager = NaiveRewardManager({"reward": {}}, _Tok(), scored)
    out = manager(_data([[4, 5, 6], [7, 8, 9]], [2, 3], ["4 5", "0"]), return_dict=True)
    expected = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, -1.0]])
    torch.testing.assert_close(out["reward_tensor"], expected)
    assert out["reward_extra_info"]["len"] == [2, 3]
    assert get_reward_manager_cls("rate_limited") is RateLimitedRewardManager


def test_dapo_reward_loop_penalty_and_checks():
    kwargs = {"overlong_buffer_cfg": {"enable": True, "len": 2, "penalty_factor": 1.0, "log": True}, "max_resp_len": 4}
    manager = DAPORewardManager({"reward": {"reward_kwargs": kwargs}}, _Tok(), lambda **kw: 0.5)
    out = asyncio.run(manager.run_single(_data([[1, 1, 1, 1]], [4], ["x"])))
    assert out["reward_score"] == pytest.approx(-0.5)  # 0.5 + min(-(4 - 2) / 2, 0)
    assert out["reward_extra_info"]["overlong"] is True
    bad = {"overlong_buffer_cfg": {"enable": True, "len": 8}, "max_resp_len": 4}
    with pytest.raises(ValueError, match="max_resp_len must be larger"):
        DAPORewardManager({"reward": {"reward_kwargs": bad}}, _Tok(), lambda **kw: 0.5)


def test_reward_loop_servers_are_refused_with_a_reason():
    with pytest.raises(ImportError, match="not provided here"):
        from verl.experimental.reward_loop import RewardLoopManager  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match="reward-model inference servers"):
        import verl.experimental.reward_loop.reward_model  # noqa: F401


def test_rate_limited_manager_is_a_trainer_reward_function():
    """RayPPOTrainer(reward_fn=manager) / PPOTrainer(reward_fn=manager): scored through score_rollouts, also from a
    worker thread (reward_model.launch_reward_fn_async)."""
    from concurrent.futures import ThreadPoolExecutor

    from verl.trainer.ppo.batch_rollout import score_rollouts

    async def api(data_source, solution_str, ground_truth, extra_info=None):
        await asyncio.sleep(0.01)
        return {"score": float(solution_str == ground_truth), "latency": 0.01}

    manager = RateLimitedRewardManager({"reward": {"max_concurrent": 2, "max_rpm": 6000}}, _Tok(), api)
    data = _data([[1, 2, 0], [3, 0, 0]], [2, 1], ["1 2", "4"])
    _, scores, extra = score_rollouts(data, manager)
    torch.testing.assert_close(scores, torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert extra["latency"] == [0.01, 0.01]
    with ThreadPoolExecutor(1) as pool:
        _, threaded, _ = pool.submit(score_rollouts, data, manager).result()
    torch.testing.assert_close(threaded, scores)


def test_rate_limited_from_the_trainer_config(byte_tokenizer, tmp_path):
    """reward_model.reward_manager=rate_limited: load_reward_manager builds the reward-loop manager with the limits of
    reward_model.reward_kwargs; keys it does not take and the process-pool safety keys are refused."""
    import os

    from verl.trainer.ppo.reward import compute_reward, load_reward_manager

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "verl", "trainer", "config", "ppo_trainer.yaml")
    fn = tmp_path / "judge.py"
    fn.write_text(
        "async def judge(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return float(solution_str.strip() == ground_truth)\n"
    )

    def config(**overrides):
        cfg = OmegaConf.load(path)
        base = {"reward_model.reward_manager": "rate_limited", "custom_reward_function.path": str(fn)}
        cfg.merge_with(OmegaConf.from_dotlist([f"{k}={v}" for k, v in {**base, **overrides}.items()]))
        cfg.custom_reward_function.name = "judge"
        return cfg

    manager = load_reward_manager(config(**{"reward_model.reward_kwargs.max_rpm": 600}), byte_tokenizer, 0)
    assert isinstance(manager, RateLimitedRewardManager) and RateLimitedRewardManager._max_rpm == 600
    eos = byte_tokenizer.eos_token_id
    data = DataProto.from_dict(
        tensors={
            "responses": torch.tensor([list(b"12") + [eos], list(b"7") + [eos, eos]]),
            "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        },
        non_tensors={
            "data_source": np.array(["t", "t"], dtype=object),
            "reward_model": np.array([{"ground_truth": "12"}, {"ground_truth": "8"}], dtype=object),
        },
    )
    scores, extra = compute_reward(data, manager)
    assert scores.sum(-1).tolist() == [1.0, 0.0] and extra["acc"] == [1.0, 0.0]
    manager.close()
    with pytest.raises(ValueError, match=r"\['max_rps'\] are not settings"):
        load_reward_manager(config(**{"reward_model.reward_kwargs.max_rps": 1}), byte_tokenizer, 0)
    with pytest.raises(ValueError, match="reward_model.on_error='zero' does not apply"):
        load_reward_manager(config(**{"reward_model.on_error": "zero"}), byte_tokenizer, 0)
