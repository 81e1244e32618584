"""Metric names and reductions of the PPO/GRPO driver, with verl's names.

Everything here is a pure function of a DataProto batch (or of timings / validation results), so the driver loop
only collects and logs. Names: ``critic/{score,rewards,advantages,returns,values}/{mean,max,min}``,
``response_length/*``, ``prompt_length/*``, ``reward_extra/<key>/{mean,max,min}`` (the extra fields a reward function
returns next to ``score``), ``timing_s/*``, ``timing_per_token_ms/*``, ``perf/*`` and
``val-core/<data_source>/<var>/{mean@N, best@N/mean, maj@N/mean}`` (and ``val-aux/...``).
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from verl.experimental.agent_loop.metrics import compute_agent_metrics
from verl.protocol import DataProto
from verl.reporting.metric import reduce_metrics  # noqa: F401 - verl exposes it here too
from verl.trainer.ppo.sessions import without_padding
from verl.utils.device import lifetime_max_memory

logger = logging.getLogger(__name__)


@contextmanager
def marked_timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    """Add the wall time of the ``with`` body to ``timing_raw[name]`` (seconds); the body is the run's current phase
    ``name`` meanwhile (:func:`verl.reporting.phase.phase`: the progress bar and its heartbeat show it)."""
    from verl.reporting.phase import phase

    start = time.perf_counter()
    try:
        with phase(name):
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
    metrics.update(compute_agent_metrics(batch.non_tensor_batch))  # agent/* of multi-turn rollouts
    return metrics


# extras already said to be non-numeric (one debug line per key and process, not one per step)
_NON_NUMERIC_EXTRAS: set[str] = set()


def _extra_number(value: Any) -> float | None:
    """A reward extra as a float (bools count 0/1; numpy scalars, 0-d arrays and one-element tensors count as their
    value); None for a missing value (None, NaN: a sample that did not report the key); raises TypeError for anything
    else (strings, lists, arrays)."""
    if (isinstance(value, torch.Tensor) and value.numel() == 1) or isinstance(value, np.generic):
        value = value.item()
    elif isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if value is None:
        return None
    if isinstance(value, numbers.Real):
        number = float(value)
        return None if math.isnan(number) else number
    raise TypeError(type(value).__name__)


def compute_reward_extra_metrics(batch: DataProto, keys: list[str] | None = None) -> dict[str, float]:
    """``reward_extra/<key>/{mean,max,min}`` over the batch for each numeric extra field of the reward function.

    A reward function may return ``{"score": s, "hits": 3, "format_ok": True}``; the reward manager turns the other
    keys into per-sample columns of ``batch.non_tensor_batch`` (``keys``, default ``meta_info["reward_extra_keys"]``,
    which the trainer fills). Samples that did not report a key (None/NaN) are left out of its statistics; a key
    with any non-numeric value (a string, a list) is skipped, said once per key at DEBUG. TRL logs every reward
    component the same way; verl itself reports them only at validation (``val-aux/<source>/<key>/...``).
    """
    keys = list(batch.meta_info.get("reward_extra_keys", [])) if keys is None else keys
    metrics: dict[str, float] = {}
    for key in keys:
        column = batch.non_tensor_batch.get(key)
        if column is None:
            continue
        try:
            values = [v for v in (_extra_number(x) for x in column) if v is not None]
        except TypeError as err:
            if key not in _NON_NUMERIC_EXTRAS:
                _NON_NUMERIC_EXTRAS.add(key)
                logger.debug("reward extra %r is not numeric (a value of type %s): not logged as a metric", key, err)
            continue
        if not values:
            continue
        arr = np.asarray(values, dtype=np.float64)
        metrics[f"reward_extra/{key}/mean"] = float(arr.mean())
        metrics[f"reward_extra/{key}/max"] = float(arr.max())
        metrics[f"reward_extra/{key}/min"] = float(arr.min())
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
    """``perf/total_num_tokens``, ``perf/time_per_step`` and ``perf/throughput`` (tokens / s / rank).

    The token count is ``sum(meta_info["global_token_num"])`` (the per-row valid tokens the trainer records, as
    upstream reads it) when the batch carries it, else the sum of its attention mask.
    """
    if batch.meta_info.get("global_token_num") is not None:
        total_num_tokens = int(sum(batch.meta_info["global_token_num"]))
    else:
        total_num_tokens = int(batch.batch["attention_mask"].sum().item())
    time_per_step = timing_raw.get("step", 0.0)
    return {
        "perf/total_num_tokens": total_num_tokens,
        "perf/time_per_step": time_per_step,
        "perf/throughput": total_num_tokens / (time_per_step * max(n_ranks, 1)) if time_per_step > 0 else 0.0,
    }


def compute_throughout_metrics(batch: DataProto, timing_raw: dict[str, float], n_gpus: int) -> dict[str, float]:
    """verl's name (sic) of :func:`compute_throughput_metrics`."""
    return compute_throughput_metrics(batch, timing_raw, n_gpus)


def memory_metrics() -> dict[str, float]:
    """``perf/max_memory_allocated_gb`` (peak GPU memory when CUDA is used, else peak RSS of this process) and
    ``perf/cpu_memory_used_gb`` (current RSS)."""
    metrics: dict[str, float] = {}
    rss = _current_rss_bytes()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # across the resets of a component measuring its own peak (verl.utils.device.reset_peak_memory_stats)
        metrics["perf/max_memory_allocated_gb"] = lifetime_max_memory("allocated") / 1024**3
        metrics["perf/max_memory_reserved_gb"] = lifetime_max_memory("reserved") / 1024**3
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


def bootstrap_metric(
    data: list[Any],
    subset_size: int,
    reduce_fns: list[Callable[[Any], float]],
    n_bootstrap: int = 1000,
    seed: int = 42,
) -> list[tuple[float, float]]:
    """Bootstrap estimate of statistics of ``subset_size`` draws (with replacement) from ``data``.

    For each of ``n_bootstrap`` resamples, every ``reduce_fn`` is applied to the resampled list; returns one
    ``(mean, std)`` over the resamples per reduce function. ``seed`` fixes the resamples (a private generator: the
    global numpy random state is left alone).
    """
    if not data:
        raise ValueError("bootstrap_metric: data is empty")
    rng = np.random.RandomState(seed)
    results: list[list[float]] = [[] for _ in reduce_fns]
    for _ in range(n_bootstrap):
        idxs = rng.choice(len(data), size=subset_size, replace=True)
        sample = [data[i] for i in idxs]
        for i, fn in enumerate(reduce_fns):
            results[i].append(fn(sample))
    return [(float(np.mean(r)), float(np.std(r))) for r in results]


def calc_maj_val(data: list[dict[str, Any]], vote_key: str, val_key: str) -> float:
    """Majority vote: the ``val_key`` of the first item whose ``vote_key`` is the most frequent (ties: the answer
    seen first)."""
    vote2vals: dict[Any, list[Any]] = defaultdict(list)
    for item in data:
        vote2vals[item[vote_key]].append(item[val_key])
    majority = max(vote2vals, key=lambda vote: len(vote2vals[vote]))
    return vote2vals[majority][0]


def _bootstrap_extremes(values: np.ndarray, subset_size: int, n_bootstrap: int, seed: int) -> tuple[float, ...]:
    """``bootstrap_metric(values, subset_size, [np.max, np.min])`` flattened, vectorised over the resamples."""
    rng = np.random.RandomState(seed)
    idxs = rng.choice(len(values), size=(n_bootstrap, subset_size), replace=True)
    samples = values[idxs]
    best, worst = samples.max(axis=1), samples.min(axis=1)
    return float(best.mean()), float(best.std()), float(worst.mean()), float(worst.std())


def _bootstrap_majority(values: np.ndarray, preds: list[Any], subset_size: int, n_bootstrap: int, seed: int) -> tuple:
    """``bootstrap_metric`` of :func:`calc_maj_val` (vote on ``preds``, value of the first majority answer),
    vectorised over the resamples: ``(mean, std)``."""
    _, codes = np.unique(np.asarray([str(p) for p in preds], dtype=object), return_inverse=True)
    rng = np.random.RandomState(seed)
    idx = rng.choice(len(values), size=(n_bootstrap, subset_size), replace=True)
    drawn = codes[idx]  # [B, k] answer codes
    counts = np.zeros((n_bootstrap, int(codes.max()) + 1), dtype=np.int64)
    np.add.at(counts, (np.arange(n_bootstrap)[:, None], drawn), 1)
    # the first drawn position whose answer has the top count: the majority answer seen first, at its first draw
    top = np.take_along_axis(counts, drawn, axis=1) == counts.max(axis=1, keepdims=True)
    first = top.argmax(axis=1)
    maj = values[idx[np.arange(n_bootstrap), first]]
    return float(maj.mean()), float(maj.std())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, bool, np.number)) and not isinstance(value, str)


def process_validation_metrics(
    data_sources: list[str],
    sample_uids: list[str],
    infos_dict: dict[str, list[Any]],
    seed: int = 42,
) -> dict[str, dict[str, dict[str, float]]]:
    """Reduce per-response validation results to ``{data_source: {var: {metric: value}}}`` (verl's names).

    ``infos_dict`` maps a variable (``reward``, ``acc``, ...) to one value per response; ``sample_uids`` groups the
    N responses of one prompt. Per prompt and numeric variable: ``mean@N``; when N > 1 also ``std@N`` and, for
    n in 2, 4, 8, ... < N and n = N, the bootstrap estimates (1000 resamples of n responses, with replacement)
    ``best@n/mean``, ``best@n/std``, ``worst@n/mean``, ``worst@n/std`` and, when ``infos_dict["pred"]`` holds the
    extracted answers, ``maj@n/mean``, ``maj@n/std`` (value of the majority answer). Prompt values are then
    averaged per data source. Variables holding strings are skipped.
    """
    grouped: dict[str, dict[str, dict[str, list[Any]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for i, (source, uid) in enumerate(zip(data_sources, sample_uids)):
        for var, values in infos_dict.items():
            grouped[source][uid][var].append(values[i])

    per_source: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for source, prompts in grouped.items():
        for prompt_vars in prompts.values():
            preds = prompt_vars.get("pred")
            for var, values in prompt_vars.items():
                if not values or not all(_is_number(v) for v in values):
                    continue
                arr = np.asarray(values, dtype=np.float64)
                n_resps = len(arr)
                out = per_source[source][var]
                out[f"mean@{n_resps}"].append(float(arr.mean()))
                if n_resps == 1:
                    continue
                out[f"std@{n_resps}"].append(float(arr.std()))
                ns = [2**i for i in range(1, n_resps.bit_length()) if 2**i < n_resps] + [n_resps]
                for n in ns:
                    best_m, best_s, worst_m, worst_s = _bootstrap_extremes(arr, n, 1000, seed)
                    out[f"best@{n}/mean"].append(best_m)
                    out[f"best@{n}/std"].append(best_s)
                    out[f"worst@{n}/mean"].append(worst_m)
                    out[f"worst@{n}/std"].append(worst_s)
                    if preds is not None:
                        maj_m, maj_s = _bootstrap_majority(arr, preds, n, 1000, seed)
                        out[f"maj@{n}/mean"].append(maj_m)
                        out[f"maj@{n}/std"].append(maj_s)
    return {
        source: {var: {name: float(np.mean(vals)) for name, vals in stats.items()} for var, stats in variables.items()}
        for source, variables in per_source.items()
    }


def flatten_validation_metrics(reduced: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """Name validation results as verl's trainer does: ``val-core/<source>/<var>/<metric>`` for the core variable
    (``acc`` when reported, else ``reward``) and its ``mean``/``maj``/``best`` metrics at the largest N;
    ``val-aux/...`` for everything else."""
    out: dict[str, float] = {}
    for source, variables in reduced.items():
        core_var = "acc" if "acc" in variables else "reward"
        for var, stats in variables.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in stats)
            for name, value in stats.items():
                core = (
                    var == core_var
                    and name.startswith(("mean", "maj", "best"))
                    and name.split("@")[-1].split("/")[0] == str(n_max)
                )
                out[f"{'val-core' if core else 'val-aux'}/{source}/{var}/{name}"] = value
    return out


def finished_step_metrics(
    batch: DataProto, timing: dict[str, float], use_critic: bool, n_ranks: int
) -> dict[str, float]:
    """Data, reward extras, timing, throughput and memory metrics of a finished PPO step (verl's names); the data
    metrics leave out the padding rows of an agent loop's segments."""
    metrics = compute_data_metrics(without_padding(batch), use_critic=use_critic)
    metrics.update(compute_reward_extra_metrics(without_padding(batch)))
    metrics.update(compute_timing_metrics(batch, timing))
    metrics.update(compute_throughput_metrics(batch, timing, n_ranks))
    metrics.update(memory_metrics())
    return metrics
