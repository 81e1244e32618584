"""metric_utils on hand-made batches; every expected number is worked out by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.ppo import metric_utils
from verl.trainer.ppo.metric_utils import (
    bootstrap_metric,
    calc_maj_val,
    compute_data_metrics,
    compute_reward_extra_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    flatten_validation_metrics,
    marked_timer,
    memory_metrics,
    process_validation_metrics,
    reduce_metrics,
)


def _batch() -> DataProto:
    """Two sequences, prompt length 3 (left-padded), response length 4.

    row 0: prompt 2 tokens, response 3 tokens; row 1: prompt 3 tokens, response 4 tokens (uses every slot).
    """
    response_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float32)
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    attention_mask = torch.cat([prompt_mask, response_mask.long()], dim=-1)
    return DataProto.from_dict(
        tensors={
            "responses": torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8]]),
            "attention_mask": attention_mask,
            "response_mask": response_mask,
            "token_level_scores": torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.5]]),
            "token_level_rewards": torch.tensor([[0.0, 0.0, 0.9, 0.0], [-0.1, 0.0, 0.0, 0.5]]),
            # the masked slot of row 0 holds a value that must not leak into any statistic
            "advantages": torch.tensor([[1.0, 2.0, 3.0, 99.0], [-1.0, -2.0, -3.0, -4.0]]),
            "returns": torch.tensor([[0.5, 0.5, 0.5, 7.0], [1.0, 1.0, 1.0, 1.0]]),
            "values": torch.tensor([[0.5, 0.5, 0.5, -9.0], [0.0, 1.0, 1.0, 1.0]]),
        }
    )


def test_data_metrics_by_hand() -> None:
    m = compute_data_metrics(_batch(), use_critic=True)
    # sequence scores are row sums: 1.0 and 0.5
    assert (m["critic/score/mean"], m["critic/score/max"], m["critic/score/min"]) == pytest.approx((0.75, 1.0, 0.5))
    # rewards: 0.9 and 0.4
    assert (m["critic/rewards/mean"], m["critic/rewards/max"], m["critic/rewards/min"]) == pytest.approx(
        (0.65, 0.9, 0.4)
    )
    # 7 valid advantages 1, 2, 3, -1, -2, -3, -4: mean -4/7
    assert (m["critic/advantages/mean"], m["critic/advantages/max"], m["critic/advantages/min"]) == pytest.approx(
        (-4 / 7, 3.0, -4.0)
    )
    # valid returns .5 .5 .5 1 1 1 1: mean 5.5/7
    assert (m["critic/returns/mean"], m["critic/returns/max"], m["critic/returns/min"]) == pytest.approx(
        (5.5 / 7, 1.0, 0.5)
    )
    # valid values .5 .5 .5 0 1 1 1: mean 4.5/7
    assert (m["critic/values/mean"], m["critic/values/max"], m["critic/values/min"]) == pytest.approx(
        (4.5 / 7, 1.0, 0.0)
    )
    # residual returns - values = 0 0 0 1 0 0 0: unbiased variance 1/7; returns' unbiased variance 1/14
    assert m["critic/vf_explained_var"] == pytest.approx(1 - (1 / 7) / (1 / 14 + 1e-5), rel=1e-5)
    # response lengths 3 and 4 of 4 slots; prompt lengths 2 and 3 of 3 slots
    assert (m["response_length/mean"], m["response_length/max"], m["response_length/min"]) == (3.5, 4.0, 3.0)
    assert m["response_length/clip_ratio"] == 0.5
    assert (m["prompt_length/mean"], m["prompt_length/max"], m["prompt_length/min"]) == (2.5, 3.0, 2.0)
    assert m["prompt_length/clip_ratio"] == 0.5


def test_data_metrics_without_critic_have_no_value_statistics() -> None:
    m = compute_data_metrics(_batch(), use_critic=False)
    assert not [k for k in m if k.startswith("critic/values") or k == "critic/vf_explained_var"]
    assert m["critic/score/mean"] == pytest.approx(0.75)


def test_data_metrics_of_a_batch_without_valid_response_tokens() -> None:
    batch = _batch()
    batch.batch["response_mask"] = torch.zeros(2, 4)
    m = compute_data_metrics(batch, use_critic=True)
    # nothing to average: statistics are 0 instead of NaN, lengths are 0
    assert m["critic/advantages/mean"] == 0.0 and m["critic/values/max"] == 0.0
    assert m["response_length/mean"] == 0.0 and m["response_length/clip_ratio"] == 0.0


def _object_column(values: list) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def test_reward_extra_metrics_by_hand(caplog: pytest.LogCaptureFixture) -> None:
    """Numeric extras: mean/max/min over the samples that reported them; strings and lists are skipped with one
    debug line per key; columns that are not reward extras are never read."""
    rows = 4
    batch = DataProto.from_dict(
        tensors={"x": torch.zeros(rows, 1)},
        non_tensors={
            "hits": np.array([3, 1, 0, 2], dtype=object),  # mean 1.5, max 3, min 0
            "format_ok": np.array([True, False, True, True], dtype=object),  # bools count 0/1: mean 0.75
            "partial": np.array([0.5, float("nan"), None, np.float32(1.5)], dtype=object),  # 2 reported: mean 1.0
            "pred": np.array(["a", "b", "c", "d"], dtype=object),  # not numeric: skipped
            "steps": _object_column([[1], [2, 3], [], [4]]),  # lists: skipped
            "uid": np.array(["u0", "u0", "u1", "u1"], dtype=object),  # not a reward extra
        },
        meta_info={"reward_extra_keys": ["hits", "format_ok", "partial", "pred", "steps", "missing"]},
    )
    metric_utils._NON_NUMERIC_EXTRAS.clear()
    with caplog.at_level("DEBUG", logger="verl.trainer.ppo.metric_utils"):
        metrics = compute_reward_extra_metrics(batch)
        assert compute_reward_extra_metrics(batch) == metrics
    assert metrics == {
        "reward_extra/hits/mean": 1.5,
        "reward_extra/hits/max": 3.0,
        "reward_extra/hits/min": 0.0,
        "reward_extra/format_ok/mean": 0.75,
        "reward_extra/format_ok/max": 1.0,
        "reward_extra/format_ok/min": 0.0,
        "reward_extra/partial/mean": 1.0,
        "reward_extra/partial/max": 1.5,
        "reward_extra/partial/min": 0.5,
    }
    skipped = [r.getMessage() for r in caplog.records if "not numeric" in r.getMessage()]
    assert len(skipped) == 2 and "'pred'" in skipped[0] and "'steps'" in skipped[1]  # once per key, two calls
    # without the trainer's list of extra keys nothing is read
    assert compute_reward_extra_metrics(DataProto.from_dict(tensors={"x": torch.zeros(1, 1)})) == {}


def test_timing_and_throughput_metrics_by_hand() -> None:
    batch = _batch()
    timing = {"gen": 0.7, "ref": 1.2, "update_actor": 2.4, "step": 3.0}
    m = compute_timing_metrics(batch, timing)
    assert {k: v for k, v in m.items() if k.startswith("timing_s/")} == {f"timing_s/{k}": v for k, v in timing.items()}
    # generation per response token (3 + 4 = 7); the other stages per token of the whole sequences (5 + 7 = 12)
    assert m["timing_per_token_ms/gen"] == pytest.approx(700 / 7)
    assert m["timing_per_token_ms/ref"] == pytest.approx(1200 / 12)
    assert m["timing_per_token_ms/update_actor"] == pytest.approx(2400 / 12)
    assert "timing_per_token_ms/step" not in m

    perf = compute_throughput_metrics(batch, timing, n_ranks=2)
    # 12 tokens in 3 s over 2 ranks: 2 tokens / s / rank
    assert perf == {"perf/total_num_tokens": 12, "perf/time_per_step": 3.0, "perf/throughput": pytest.approx(2.0)}
    assert compute_throughput_metrics(batch, {}, n_ranks=1)["perf/throughput"] == 0.0
    batch.meta_info["global_token_num"] = [100, 200, 300]  # recorded by the trainer: upstream counts from it
    assert compute_throughput_metrics(batch, timing, n_ranks=2)["perf/total_num_tokens"] == 600
    batch.meta_info.pop("global_token_num")


def test_marked_timer_accumulates_and_records_on_error(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([10.0, 10.5, 20.0, 20.25])
    monkeypatch.setattr(metric_utils.time, "perf_counter", lambda: next(clock))
    timing: dict[str, float] = {}
    with marked_timer("gen", timing):
        pass
    with pytest.raises(RuntimeError), marked_timer("gen", timing):
        raise RuntimeError("the body failed")
    assert timing == {"gen": pytest.approx(0.75)}


def test_reduce_metrics_means_lists_and_passes_scalars() -> None:
    out = reduce_metrics({"a": [1.0, 2.0, 3.0], "b": 5, "c": torch.tensor([1.0, 3.0]), "d": [], "e": [[1, 2], [3, 6]]})
    assert out["a"] == 2.0 and out["b"] == 5.0 and out["c"] == 2.0 and out["e"] == 3.0
    assert math.isnan(out["d"])
    assert all(isinstance(v, float) for v in out.values())


def test_memory_metrics_report_a_positive_peak() -> None:
    m = memory_metrics()
    assert m["perf/max_memory_allocated_gb"] > 0
    assert m["perf/cpu_memory_used_gb"] > 0


def test_validation_metrics_by_hand() -> None:
    # source s1: two prompts with 4 responses each; source s2: one prompt with one response
    sources = ["s1"] * 8 + ["s2"]
    uids = ["u1"] * 4 + ["u2"] * 4 + ["u3"]
    infos = {
        "reward": [1, 0, 0, 1, 0, 0, 0, 1, 0.3],
        "pred": ["a", "b", "b", "a", "x", "x", "y", "z", "q"],
        "note": ["text"] * 9,  # not numeric: ignored
    }
    reduced = process_validation_metrics(sources, uids, infos)
    s1 = reduced["s1"]["reward"]
    assert s1["mean@4"] == pytest.approx((0.5 + 0.25) / 2)
    assert s1["std@4"] == pytest.approx((0.5 + math.sqrt(3 / 16)) / 2)
    # verl's bootstrap names: n = 2 and n = N = 4
    assert {k for k in s1 if "@" in k and "/" in k} == {
        f"{m}@{n}/{s}" for m in ("best", "worst", "maj") for n in (2, 4) for s in ("mean", "std")
    }
    # best@2 of 0/1 scores drawn with replacement: u1 (half right) 1 - 0.5^2 = 0.75; u2 (a quarter) 1 - 0.75^2
    assert s1["best@2/mean"] == pytest.approx((0.75 + 1 - 0.75**2) / 2, abs=0.04)
    assert s1["worst@2/mean"] == pytest.approx((0.25 + 0.25**2) / 2, abs=0.04)
    assert s1["best@4/mean"] >= s1["best@2/mean"] >= s1["mean@4"] >= s1["worst@2/mean"]
    assert 0.0 <= s1["maj@4/mean"] <= 1.0
    assert "note" not in reduced["s1"] and "pred" not in reduced["s1"]
    assert reduced["s2"] == {"reward": {"mean@1": pytest.approx(0.3)}}
    # a fixed seed gives the same bootstrap
    assert process_validation_metrics(sources, uids, infos) == reduced

    flat = flatten_validation_metrics(reduced)
    assert flat["val-core/s1/reward/mean@4"] == pytest.approx(0.375)
    assert flat["val-core/s1/reward/best@4/mean"] == pytest.approx(s1["best@4/mean"])
    assert flat["val-core/s1/reward/maj@4/mean"] == pytest.approx(s1["maj@4/mean"])
    # only the largest N is core; std and worst are auxiliary
    assert "val-aux/s1/reward/best@2/mean" in flat and "val-aux/s1/reward/worst@4/mean" in flat
    assert flat["val-aux/s1/reward/std@4"] == pytest.approx(s1["std@4"])
    assert flat["val-core/s2/reward/mean@1"] == pytest.approx(0.3)


def test_bootstrap_metric_and_majority_vote() -> None:
    # every resample of a constant list has the same max: mean equals it, std 0
    assert bootstrap_metric([2.0, 2.0, 2.0], 2, [np.max]) == [(2.0, 0.0)]
    (mean_max, std_max), (mean_min, _) = bootstrap_metric([0.0, 1.0], 3, [np.max, np.min], n_bootstrap=4000)
    assert mean_max == pytest.approx(1 - 0.5**3, abs=0.03) and std_max > 0
    assert mean_min == pytest.approx(0.5**3, abs=0.03)
    assert bootstrap_metric([1, 5, 9], 2, [np.mean], seed=7) == bootstrap_metric([1, 5, 9], 2, [np.mean], seed=7)
    votes = [{"pred": "A", "val": 0.9}, {"pred": "B", "val": 0.8}, {"pred": "A", "val": 0.7}]
    assert calc_maj_val(votes, vote_key="pred", val_key="val") == 0.9
    with pytest.raises(ValueError, match="empty"):
        bootstrap_metric([], 2, [np.max])


def test_vectorised_majority_equals_the_bootstrap_of_calc_maj_val() -> None:
    import functools

    values, preds = [0.9, 0.1, 0.7, 0.3, 0.5], ["a", "b", "b", "a", "c"]
    reduced = process_validation_metrics(["s"] * 5, ["u"] * 5, {"reward": values, "pred": preds})["s"]["reward"]
    votes = [{"val": v, "pred": p} for v, p in zip(values, preds)]
    for n in (2, 4, 5):
        maj = functools.partial(calc_maj_val, vote_key="pred", val_key="val")
        [(mean, std)] = bootstrap_metric(votes, n, [maj], seed=42)
        assert reduced[f"maj@{n}/mean"] == pytest.approx(mean) and reduced[f"maj@{n}/std"] == pytest.approx(std)
        [(best, _), (worst, _)] = bootstrap_metric(values, n, [np.max, np.min], seed=42)
        assert reduced[f"best@{n}/mean"] == pytest.approx(best) and reduced[f"worst@{n}/mean"] == pytest.approx(worst)


def test_acc_is_the_core_variable_when_reported() -> None:
    reduced = process_validation_metrics(["s"] * 3, ["u"] * 3, {"reward": [0.4, 0.1, 0.7], "acc": [1, 0, 0]})
    flat = flatten_validation_metrics(reduced)
    assert flat["val-core/s/acc/mean@3"] == pytest.approx(1 / 3)
    assert "val-core/s/acc/best@3/mean" in flat
    assert "val-aux/s/reward/mean@3" in flat  # acc is reported, so reward is auxiliary
    assert np.isclose(flat["val-aux/s/reward/std@3"], np.std([0.4, 0.1, 0.7]))
