"""Metric names and reductions of the PPO/GRPO driver, with verl's names.

Everything here is a pure function of a DataProto batch (or of timings / validation results), so the driver loop
only collects and logs. Names: ``critic/{score,rewards,advantages,returns,values}/{mean,max,min}``,
``response_length/*``, ``prompt_length/*``, ``timing_s/*``, ``timing_per_token_ms/*``, ``perf/*`` and
``val-core/<data_source>/<var>/{mean,best,maj}@N``.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto


@contextmanager
def marked_timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    """Add the wall time of the ``with`` body to ``timing_raw[name]`` (seconds)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - start


def _masked_stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {f"{prefix}/mean": 0.0, f"{prefix}/max": 0.0, f"{prefix}/min": 0.0}
    values = values.float()
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def compute_data_metrics(batch: DataProto, use_critic: bool = True) -> dict[str, float]:
    """Statistics of one training batch.

    Reads ``token_level_scores``, ``token_level_rewards``, ``advantages``, ``returns``, ``values`` (when the critic
    is used), ``responses``, ``attention_mask`` and ``response_mask`` (all ``[batch, ...]``). Sequence scores are
    the row sums of the token-level tensors; advantage/return/value statistics are over valid response tokens.
    """
    response_length = batch.batch["responses"].shape[-1]
    response_mask = batch.batch["response_mask"].bool()
    prompt_mask = batch.batch["attention_mask"][:, :-response_length].bool()
    prompt_len = prompt_mask.sum(-1).float()
    resp_len = response_mask.sum(-1).float()

    metrics: dict[str, float] = {}
    metrics.update(_masked_stats("critic/score", batch.batch["token_level_scores"].sum(-1)))
    metrics.update(_masked_stats("critic/rewards", batch.batch["token_level_rewards"].sum(-1)))
    metrics.update(_masked_stats("critic/advantages", torch.masked_select(batch.batch["advantages"], response_mask)))
    metrics.update(_masked_stats("critic/returns", torch.masked_select(batch.batch["returns"], response_mask)))
    if use_critic and "values" in batch.batch.keys():
        values = torch.masked_select(batch.batch["values"], response_mask)
        returns = torch.masked_select(batch.batch["returns"], response_mask)
        metrics.update(_masked_stats("critic/values", values))
        # fraction of the return variance the value function explains (1 is perfect, <= 0 is useless)
        return_var = torch.var(returns) if returns.numel() > 1 else torch.tensor(0.0)
        residual_var = torch.var(returns - values) if returns.numel() > 1 else torch.tensor(0.0)
        metrics["critic/vf_explained_var"] = (1.0 - residual_var / (return_var + 1e-5)).item()

    metrics.update(_masked_stats("response_length", resp_len))
    metrics["response_length/clip_ratio"] = torch.eq(resp_len, response_length).float().mean().item()
    metrics.update(_masked_stats("prompt_length", prompt_len))
    max_prompt_length = prompt_mask.shape[-1]
    metrics["prompt_length/clip_ratio"] = torch.eq(prompt_len, max_prompt_length).float().mean().item()
    return metrics


def compute_timing_metrics(batch: DataProto, timing_raw: dict[str, float]) -> dict[str, float]:
    """``timing_s/<stage>`` for every timed stage and ``timing_per_token_ms/<stage>`` where a token count applies.

    Generation is normalised by response tokens; stages that process whole sequences by all valid tokens.
    """
    response_length = batch.batch["responses"].shape[-1]
    num_response_tokens = int(batch.batch["response_mask"].sum().item())
    num_overall_tokens = int(batch.batch["attention_mask"].sum().item())
    tokens_per_stage = {"gen": num_response_tokens}
    for stage in ("ref", "values", "adv", "update_critic", "update_actor", "old_log_prob", "reward"):
        tokens_per_stage[stage] = num_overall_tokens
    del response_length
    metrics = {f"timing_s/{name}": value for name, value in timing_raw.items()}
    for name, value in timing_raw.items():
        if name in tokens_per_stage and tokens_per_stage[name] > 0:
            metrics[f"timing_per_token_ms/{name}"] = value * 1000.0 / tokens_per_stage[name]
    return metrics


def compute_throughput_metrics(batch: DataProto, timing_raw: dict[str, float], n_ranks: int) -> dict[str, float]:
    """``perf/total_num_tokens``, ``perf/time_per_step`` and ``perf/throughput`` (tokens / s / rank)."""
    total_num_tokens = int(batch.batch["attention_mask"].sum().item())
    time_per_step = timing_raw.get("step", 0.0)
    return {
        "perf/total_num_tokens": total_num_tokens,
        "perf/time_per_step": time_per_step,
        "perf/throughput": total_num_tokens / (time_per_step * max(n_ranks, 1)) if time_per_step > 0 else 0.0,
    }


def memory_metrics() -> dict[str, float]:
    """``perf/max_memory_allocated_gb`` (peak GPU memory when CUDA is used, else peak RSS of this process) and
    ``perf/cpu_memory_used_gb`` (current RSS)."""
    metrics: dict[str, float] = {}
    rss = _current_rss_bytes()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        metrics["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 1024**3
        metrics["perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved() / 1024**3
    else:
        metrics["perf/max_memory_allocated_gb"] = _peak_rss_bytes() / 1024**3
    metrics["perf/cpu_memory_used_gb"] = rss / 1024**3
    return metrics


def _current_rss_bytes() -> int:
    try:
        import psutil

        return int(psutil.Process(os.getpid()).memory_info().rss)
    except ImportError:  # pragma: no cover - psutil ships with ray
        return _peak_rss_bytes()


def _peak_rss_bytes() -> int:
    import resource

    # ru_maxrss is KiB on Linux
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reduce_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """Mean of every list-valued metric (workers return per-micro-batch lists); scalars pass through."""
    reduced: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, (list, tuple, np.ndarray)):
            flat = np.asarray(value, dtype=np.float64).reshape(-1)
            reduced[key] = float(np.mean(flat)) if flat.size else float("nan")
        elif isinstance(value, torch.Tensor):
            reduced[key] = float(value.float().mean().item())
        else:
            reduced[key] = float(value)
    return reduced


def _best_at_k(values: list[float], k: int) -> float:
    """Expected maximum of ``k`` draws without replacement from ``values`` (exact, via order statistics).

    For 0/1 scores this is the unbiased pass@k of Chen et al. 2021: 1 - C(n-c, k) / C(n, k).
    """
    n = len(values)
    ordered = sorted(values)
    total = math.comb(n, k)
    # the i-th smallest (0-based) is the max of a k-subset in C(i, k-1) subsets
    return sum(v * math.comb(i, k - 1) for i, v in enumerate(ordered)) / total


def _maj_at_k(preds: list[Any], values: list[float], k: int) -> float:
    """Score of the majority answer among the first ``k`` responses (ties: the first seen)."""
    preds, values = preds[:k], values[:k]
    counts = Counter(str(p) for p in preds)
    top = counts.most_common(1)[0][0]
    for pred, value in zip(preds, values):
        if str(pred) == top:
            return value
    return 0.0


def process_validation_metrics(
    data_sources: list[str],
    sample_uids: list[str],
    infos: dict[str, list[Any]],
) -> dict[str, dict[str, dict[str, float]]]:
    """Reduce per-response validation results to ``{data_source: {var: {"mean@N": .., "best@k": .., ...}}}``.

    ``infos`` maps a variable name (``reward``, ``acc``, ...) to one value per response; ``sample_uids`` groups the
    N responses of one prompt. For each prompt: ``mean@N``, ``std@N``, for k in 2, 4, ... <= N ``best@k`` (expected
    maximum over k of the N responses) and, when ``infos["pred"]`` exists, ``maj@k``. The prompt values are then
    averaged per data source.
    """
    grouped: dict[str, dict[str, dict[str, list[Any]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for i, (source, uid) in enumerate(zip(data_sources, sample_uids)):
        for var, values in infos.items():
            grouped[source][uid][var].append(values[i])

    per_source: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for source, prompts in grouped.items():
        for prompt_vars in prompts.values():
            preds = prompt_vars.get("pred")
            for var, values in prompt_vars.items():
                if var == "pred" or not values or not all(isinstance(v, (int, float, bool, np.number)) for v in values):
                    continue
                values = [float(v) for v in values]
                n = len(values)
                out = per_source[source][var]
                out[f"mean@{n}"].append(float(np.mean(values)))
                if n > 1:
                    out[f"std@{n}"].append(float(np.std(values)))
                k = 2
                while k <= n:
                    out[f"best@{k}"].append(_best_at_k(values, k))
                    if preds is not None:
                        out[f"maj@{k}"].append(_maj_at_k(preds, values, k))
                    k *= 2
    return {
        source: {var: {name: float(np.mean(vals)) for name, vals in stats.items()} for var, stats in variables.items()}
        for source, variables in per_source.items()
    }


def flatten_validation_metrics(
    reduced: dict[str, dict[str, dict[str, float]]], core_var: str = "reward"
) -> dict[str, float]:
    """Name validation results as verl does: ``val-core/<source>/<var>/<metric>`` for the main score's mean and
    best/maj, ``val-aux/...`` for everything else."""
    out: dict[str, float] = {}
    for source, variables in reduced.items():
        for var, stats in variables.items():
            for name, value in stats.items():
                core = var in (core_var, "acc") and (name.startswith("mean@") or name.startswith(("best@", "maj@")))
                out[f"{'val-core' if core else 'val-aux'}/{source}/{var}/{name}"] = value
    return out
