"""Evaluation during training: ``Evaluator.evaluate(trainer) -> dict`` and the built-in evaluators.

An evaluator is called by ``RayPPOTrainer.fit`` after every step (``trainer.evaluators``); what it returns is merged
into the step's metrics. Built-ins use the trainer's own worker groups (``trainer.actor_rollout_wg``) - no second
copy of the model is loaded:

- :class:`RewardEvaluator`: mean reward of greedy responses on a prompt set (``eval/reward/mean``);
- :class:`AccuracyEvaluator`: fraction of correct greedy responses (``eval/acc``);
- :class:`KLEvaluator`: mean per-token KL(actor || reference) on a fixed prompt set (``eval/kl_ref``);
- :class:`DiversityEvaluator`: distinct-1/2, repetition rate and n-gram entropy of sampled responses.

The diversity measures are pure functions of strings (or token sequences) at the bottom of this module.

Example::

    trainer.evaluators.append(DiversityEvaluator(every_n_steps=5, n=4))

    class LengthEvaluator(Evaluator):
        def evaluate(self, trainer):
            batch = trainer.last_batch
            return {"eval/len": batch.batch["response_mask"].sum(-1).float().mean().item()}
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.ppo.batch_rollout import (
    decode_responses,
    generate_groups,
    generate_rollouts,
    prompt_meta,
    score_rollouts,
)
from verl.trainer.ppo.sessions import final_rows

__all__ = [
    "AccuracyEvaluator",
    "DiversityEvaluator",
    "Evaluator",
    "KLEvaluator",
    "RewardEvaluator",
    "decode_responses",
    "distinct_n",
    "generate_for_eval",
    "ngram_entropy",
    "ngrams",
    "repetition_rate",
]


# ----------------------------------------------------------------------------------------------- base class
class Evaluator:
    """Base class: subclass it and override :meth:`evaluate`.

    Args:
        dataloader: an iterable of prompt batches (dicts from ``RLHFDataset`` + ``collate_fn``, or DataProtos); when
            None the trainer's ``val_dataloader`` is used.
        every_n_steps: run on steps divisible by this (built-ins return ``{}`` on the other steps).
        max_batches: stop after this many batches of the dataloader (None: all).
        prefix: metric name prefix.
    """

    def __init__(
        self,
        dataloader: Iterable[Any] | None = None,
        every_n_steps: int = 1,
        max_batches: int | None = None,
        prefix: str = "eval",
    ) -> None:
        if every_n_steps < 1:
            raise ValueError(f"{type(self).__name__}: every_n_steps must be >= 1, got {every_n_steps}")
        self.dataloader = dataloader
        self.every_n_steps = int(every_n_steps)
        self.max_batches = max_batches
        self.prefix = prefix

    def evaluate(self, trainer: Any) -> dict[str, float]:
        """Return metrics (name -> float) for the trainer's current state."""
        raise NotImplementedError(f"{type(self).__name__} must override evaluate(trainer)")

    def should_run(self, trainer: Any) -> bool:
        """Whether the trainer's current ``global_steps`` is one this evaluator runs on."""
        return int(getattr(trainer, "global_steps", 0)) % self.every_n_steps == 0

    def batches(self, trainer: Any) -> Iterator[DataProto]:
        """The prompt batches to evaluate on, as DataProtos (own dataloader, else the trainer's validation one)."""
        loader = self.dataloader if self.dataloader is not None else getattr(trainer, "val_dataloader", None)
        if loader is None:
            raise ValueError(
                f"{type(self).__name__}: no prompts to evaluate on; pass dataloader=... or give the trainer a "
                "validation set (data.val_files)"
            )
        for i, item in enumerate(loader):
            if self.max_batches is not None and i >= self.max_batches:
                break
            yield item if isinstance(item, DataProto) else DataProto.from_single_dict(item)


# ------------------------------------------------------------------------------------------------- helpers
def generate_for_eval(
    trainer: Any, batch: DataProto, n: int = 1, do_sample: bool = False, temperature: float | None = None
) -> DataProto:
    """Generate ``n`` responses per prompt of ``batch`` where the trainer generates (its ``generate_on_engines``:
    its ranks' engines and agent loops, or an asynchronous trainer's rollouter; else its ``actor_rollout_wg``),
    through :func:`verl.trainer.ppo.batch_rollout.generate_groups`.

    Greedy calls (``do_sample=False``) are marked ``validate`` so the engine applies ``rollout.val_kwargs``; sampled
    calls use the rollout's training settings unless ``temperature`` is given. Evaluation calls are not numbered
    with the training calls' seeds (``rollout.seed``): adding an evaluator leaves the training samples as they were.

    Returns the prompts' non-tensor columns repeated ``n`` times (interleaved, with a ``uid`` per prompt) joined
    with the rollout output (``responses [bs*n, response_len]``, ``response_mask``, full ``input_ids`` ...); a
    trajectory's final row only where an agent loop gave it several (:func:`verl.trainer.ppo.sessions.final_rows`).
    """
    meta = prompt_meta(trainer.tokenizer, int(getattr(trainer, "global_steps", 0)))
    # greedy evaluation follows rollout.val_kwargs; sampled evaluation the training sampling settings
    # (val_kwargs usually has temperature 0, which would silently turn sampling into greedy decoding)
    meta.update({"validate": not do_sample, "do_sample": bool(do_sample)})
    if temperature is not None:
        meta["temperature"] = float(temperature)
    prompts = DataProto(batch.batch, {k: v for k, v in batch.non_tensor_batch.items() if k != "uid"}, batch.meta_info)
    # a PPO trainer's own generation path: its ranks' engines or agent loops, or the asynchronous trainers'
    # rollouter (whose trainer ranks hold no engine); an object with an actor group alone generates on that group
    engines = getattr(trainer, "generate_on_engines", None)
    if engines is None:
        engines = lambda gen: generate_rollouts(trainer.actor_rollout_wg, None, gen)  # noqa: E731
    rollouts = generate_groups(prompts, n, engines, meta)
    return final_rows(rollouts)  # one row per trajectory (an agent's split history gave several)


def _sources(data: DataProto) -> list[str]:
    return [str(s) for s in data.non_tensor_batch.get("data_source", np.array(["unknown"] * len(data)))]


# ----------------------------------------------------------------------------------------------- built-ins
class RewardEvaluator(Evaluator):
    """Mean sequence reward of greedy responses: ``<prefix>/reward/mean`` and ``<prefix>/reward/<source>/mean``.

    ``reward_fn`` is a reward manager (``fn(data, return_dict=True)``); default: the trainer's ``val_reward_fn``.
    """

    def __init__(self, reward_fn: Callable[..., Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reward_fn = reward_fn

    def evaluate(self, trainer: Any) -> dict[str, float]:
        """Generate greedily on the prompt set, score, average (per data source and overall)."""
        if not self.should_run(trainer):
            return {}
        reward_fn = self.reward_fn or getattr(trainer, "val_reward_fn", None)
        if reward_fn is None:
            raise ValueError("RewardEvaluator: no reward_fn given and the trainer has no val_reward_fn")
        scores: list[float] = []
        sources: list[str] = []
        for batch in self.batches(trainer):
            data = generate_for_eval(trainer, batch)
            _, tensor, _ = score_rollouts(data, reward_fn)
            scores.extend(tensor.sum(-1).tolist())
            sources.extend(_sources(data))
        return _grouped_means(f"{self.prefix}/reward", scores, sources)


class AccuracyEvaluator(Evaluator):
    """Fraction of greedy responses judged correct: ``<prefix>/acc`` and ``<prefix>/acc/<source>``.

    ``is_correct(data_source, response, ground_truth) -> bool``; default: ``default_compute_score`` (its ``acc``
    entry when it returns a dict, else its score) is at least ``threshold``.
    """

    def __init__(
        self,
        is_correct: Callable[[str, str, Any], bool] | None = None,
        threshold: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.is_correct = is_correct or self._default_is_correct
        self.threshold = threshold

    def _default_is_correct(self, data_source: str, response: str, ground_truth: Any) -> bool:
        from verl.rewards import default_compute_score

        result = default_compute_score(data_source, response, ground_truth)
        if isinstance(result, dict):
            result = result.get("acc", result.get("score", 0.0))
        return float(result) >= self.threshold

    def evaluate(self, trainer: Any) -> dict[str, float]:
        """Generate greedily on the prompt set and count correct answers."""
        if not self.should_run(trainer):
            return {}
        correct: list[float] = []
        sources: list[str] = []
        for batch in self.batches(trainer):
            data = generate_for_eval(trainer, batch)
            texts = decode_responses(trainer.tokenizer, data)
            srcs = _sources(data)
            rms = data.non_tensor_batch.get("reward_model")
            if rms is None:
                raise ValueError("AccuracyEvaluator: the prompt batches have no reward_model column (ground truth)")
            for source, text, rm in zip(srcs, texts, rms):
                correct.append(float(bool(self.is_correct(source, text, rm.get("ground_truth")))))
            sources.extend(srcs)
        return _grouped_means(f"{self.prefix}/acc", correct, sources, overall_name="")


class KLEvaluator(Evaluator):
    """Mean KL(actor || reference) per valid response token on a fixed prompt set: ``<prefix>/kl_ref``.

    The responses are generated greedily by the current actor; the log-probs come from the actor group's
    ``compute_log_prob`` (``old_log_probs``) and ``compute_ref_log_prob`` (``ref_log_prob``), both
    ``[batch, response_len]``. The per-token estimator is ``kl_type`` of ``core_algos.kl_penalty`` (``kl``: the
    log-ratio ``log pi(a) - log pi_ref(a)``, whose expectation under the actor is KL(actor || ref); ``low_var_kl``:
    Schulman's k3). Sequences average their tokens first, then sequences are averaged. The prompt set is fixed at
    the first call (the first ``max_batches`` batches, default 1), so the numbers are comparable across steps.
    """

    def __init__(self, kl_type: str = "kl", **kwargs: Any) -> None:
        kwargs.setdefault("max_batches", 1)
        super().__init__(**kwargs)
        self.kl_type = kl_type
        self._fixed: list[DataProto] | None = None

    def evaluate(self, trainer: Any) -> dict[str, float]:
        """Generate, score both policies, average the per-token KL."""
        if not self.should_run(trainer):
            return {}
        if not getattr(trainer, "use_reference_policy", True):
            raise ValueError(
                "KLEvaluator needs a reference policy; enable one with actor_rollout_ref.actor.use_kl_loss=true or "
                "algorithm.use_kl_in_reward=true"
            )
        from verl.algorithms.core_algos import kl_penalty
        from verl.utils.torch_functional import masked_mean

        if self._fixed is None:
            self._fixed = list(self.batches(trainer))
        wg = trainer.actor_rollout_wg
        per_seq: list[torch.Tensor] = []
        for batch in self._fixed:
            data = generate_for_eval(trainer, batch)
            padded, pad = pad_dataproto_to_divisor(data, int(getattr(wg, "world_size", 1)))
            old = unpad_dataproto(wg.compute_log_prob(padded), pad).batch["old_log_probs"]
            ref = unpad_dataproto(wg.compute_ref_log_prob(padded), pad).batch["ref_log_prob"]
            mask = data.batch["response_mask"].float()
            kl = kl_penalty(old.float(), ref.float(), self.kl_type)
            per_seq.append(masked_mean(kl, mask, axis=-1))
        values = torch.cat(per_seq)
        return {f"{self.prefix}/kl_ref": float(values.mean().item())}


class DiversityEvaluator(Evaluator):
    """Diversity of ``n`` sampled responses per prompt (words split on whitespace).

    Metrics: ``<prefix>/diversity/distinct_1``, ``distinct_2``, ``repetition_rate`` (seq-rep-``rep_n``) and
    ``ngram_entropy`` (of ``entropy_n``-grams, bits), all computed over the decoded responses.
    """

    def __init__(
        self,
        n: int = 4,
        temperature: float | None = None,
        rep_n: int = 2,
        entropy_n: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.n, self.temperature, self.rep_n, self.entropy_n = int(n), temperature, int(rep_n), int(entropy_n)

    def evaluate(self, trainer: Any) -> dict[str, float]:
        """Sample, decode, measure."""
        if not self.should_run(trainer):
            return {}
        texts: list[str] = []
        for batch in self.batches(trainer):
            data = generate_for_eval(trainer, batch, n=self.n, do_sample=True, temperature=self.temperature)
            texts.extend(decode_responses(trainer.tokenizer, data))
        p = f"{self.prefix}/diversity"
        return {
            f"{p}/distinct_1": distinct_n(texts, 1),
            f"{p}/distinct_2": distinct_n(texts, 2),
            f"{p}/repetition_rate": repetition_rate(texts, self.rep_n),
            f"{p}/ngram_entropy": ngram_entropy(texts, self.entropy_n),
        }


def _grouped_means(name: str, values: list[float], sources: list[str], overall_name: str = "mean") -> dict[str, float]:
    if not values:
        return {}
    suffix = f"/{overall_name}" if overall_name else ""
    out = {f"{name}{suffix}": float(np.mean(values))}
    by_source: dict[str, list[float]] = {}
    for v, s in zip(values, sources):
        by_source.setdefault(s, []).append(v)
    for s, vs in by_source.items():
        out[f"{name}/{s}{suffix}"] = float(np.mean(vs))
    return out


# --------------------------------------------------------------------------------------- diversity measures
Text = str | Sequence[Hashable]


def _tokens(text: Text) -> list[Hashable]:
    return text.split() if isinstance(text, str) else list(text)


def ngrams(text: Text, n: int) -> list[tuple[Hashable, ...]]:
    """The ``n``-grams of one text (whitespace-separated words) or token sequence, in order."""
    if n < 1:
        raise ValueError(f"n-gram order must be >= 1, got {n}")
    toks = _tokens(text)
    return [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]


def distinct_n(texts: Sequence[Text], n: int) -> float:
    """distinct-n (Li et al., 2016): number of distinct n-grams / total n-grams, pooled over ``texts``.

    1.0 means no n-gram is ever repeated; 0.0 when there is no n-gram at all.
    """
    grams = [g for t in texts for g in ngrams(t, n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def repetition_rate(texts: Sequence[Text], n: int = 2) -> float:
    """seq-rep-n (Welleck et al., 2020): per text ``1 - distinct n-grams / n-grams``, averaged over the texts that
    have at least one n-gram (0.0 when none has). The share of a text's n-grams that repeat an earlier one."""
    rates = []
    for t in texts:
        grams = ngrams(t, n)
        if grams:
            rates.append(1.0 - len(set(grams)) / len(grams))
    return float(np.mean(rates)) if rates else 0.0


def ngram_entropy(texts: Sequence[Text], n: int = 2) -> float:
    """Shannon entropy in bits, ``-sum p log2 p``, of the n-gram frequency distribution pooled over ``texts``
    (Ent-n of Zhang et al., 2018). 0.0 when there is no n-gram."""
    counts = Counter(g for t in texts for g in ngrams(t, n))
    total = sum(counts.values())
    if total == 0:
        return 0.0
    return float(-sum((c / total) * math.log2(c / total) for c in counts.values()))
