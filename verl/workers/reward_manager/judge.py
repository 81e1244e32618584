"""The ``judge`` reward manager: an LLM judge scores each response, optionally mixed with the rule reward.

``reward = judge.weight * judge_score + judge.rule_weight * rule_score``, where ``judge_score`` comes from
:class:`verl.rewards.judge.LLMJudge` (pointwise ratings or pairwise win shares within the batch's GRPO
groups, ``uid``) and ``rule_score`` from the run's reward function (``custom_reward_function`` or the default
scorers), called only when ``rule_weight != 0``. A judge failure under ``on_error=skip`` leaves the judge term out
of that sample's reward. Per-sample extras (logged as ``reward_extra/<key>/{mean,max,min}``): ``judge_score``,
``judge_latency_s``, ``judge_parse_failure``, ``judge_request_failure``, ``judge_skipped`` and ``rule_score``;
batch counters ``reward/judge_parse_failures`` and ``reward/judge_request_failures``.

A batch whose agent loops were judged during the rollout (``reward_model.judge.overlap_rollout``: the columns of
``verl.experimental.agent_loop.judge_overlap`` on every row, each for the judge prompt this manager builds) is
scored from those answers, through the same parser and ``on_error``, without asking the judge again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from verl.base_config import omega_conf_to_dataclass
from verl.rewards.judge import LLMJudge, OpenAIJudgeBackend, WorkerGroupJudgeBackend
from verl.rewards.judge.backends import JudgeRequestError
from verl.rewards.judge.judge import JudgeResult
from verl.sections.reward_model import JudgeConfig
from verl.workers.reward_manager.abstract import Sample, normalize_result
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.registry import register

logger = logging.getLogger(__name__)


def build_judge(config: JudgeConfig | Mapping[str, Any], parse_fn: Callable[[str], float] | None = None) -> LLMJudge:
    """An :class:`LLMJudge` from a ``reward_model.judge`` section (a partial mapping is completed from
    :class:`JudgeConfig`, the one home of its defaults)."""
    cfg = omega_conf_to_dataclass(config, JudgeConfig)
    backend_name = cfg.backend
    if backend_name == "openai":
        if not cfg.url:
            raise ValueError("reward_model.judge.url: the openai judge backend needs the endpoint's API base URL")
        backend: Any = OpenAIJudgeBackend(
            url=str(cfg.url),
            model=str(cfg.model or "judge"),
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            max_concurrency=cfg.max_concurrency,
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            api_key_env=cfg.api_key_env,
        )
    elif backend_name == "hf":
        import torch

        # loaded only for this backend: the hf engine, the model loader and the prompt encoder
        from verl.workers.judge_worker import HFJudgeBackend

        # next to the trainer, on its accelerator
        backend = HFJudgeBackend.from_config(cfg, device="cuda" if torch.cuda.is_available() else None)
    elif backend_name == "worker":
        if not cfg.model:
            raise ValueError("reward_model.judge.model: the worker judge backend needs the judge's model path")
        backend = WorkerGroupJudgeBackend()  # the trainer binds its judge worker group in init_workers
    else:
        raise ValueError(f"reward_model.judge.backend must be 'openai', 'hf' or 'worker', got {backend_name!r}")
    return LLMJudge(
        backend,
        mode=cfg.mode,
        template=cfg.template,
        parse_fn=parse_fn,
        score_pattern=cfg.score_pattern,
        max_score=cfg.max_score,
        on_error=cfg.on_error,
        both_orders=cfg.both_orders,
    )


def bind_judge_worker_group(group: Any, *reward_fns: Any) -> int:
    """Hand a ``judge`` worker group to the :class:`WorkerGroupJudgeBackend` of each reward function's judge (the
    trainer's training and validation reward functions, built before the workers); returns how many were bound.
    Reward functions without such a backend are left alone (a warning when none has one)."""
    bound = 0
    for reward_fn in {id(f): f for f in reward_fns if f is not None}.values():
        backend = getattr(getattr(reward_fn, "judge", None), "backend", None)
        if isinstance(backend, WorkerGroupJudgeBackend):
            backend.bind(group)
            bound += 1
    if not bound:
        logger.warning(
            "reward_model.judge.backend=worker: a judge worker group was created but no reward function has a "
            "worker-group judge backend to use it"
        )
    return bound


@register("judge")
class JudgeRewardManager(NaiveRewardManager):
    """Scores with an LLM judge (``judge``: an :class:`LLMJudge`, or ``judge_config``: the ``reward_model.judge``
    section to build one), weighted by ``weight`` and mixed with ``rule_weight`` times the rule reward."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        judge: LLMJudge | None = None,
        judge_config: JudgeConfig | Mapping[str, Any] | None = None,
        weight: float | None = None,
        rule_weight: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, num_examine, **kwargs)
        cfg = omega_conf_to_dataclass(judge_config, JudgeConfig)  # None: JudgeConfig's defaults
        if judge is None:
            judge = build_judge(cfg)
        self.judge = judge
        self.weight = float(cfg.weight if weight is None else weight)
        self.rule_weight = float(cfg.rule_weight if rule_weight is None else rule_weight)
        self._group_ids: list[Any] | None = None
        self._answered: dict[str, Any] | None = None
        self.reused_batches = 0  # batches scored from the answers the rollout received (overlap_rollout)

    def __call__(self, data: Any, return_dict: bool = False) -> Any:
        """As :meth:`AbstractRewardManager.__call__`; the batch's ``uid`` column groups responses for pairwise
        judging."""
        uid = data.non_tensor_batch.get("uid") if getattr(data, "non_tensor_batch", None) is not None else None
        self._group_ids = None if uid is None else list(uid)
        self._answered = self._precomputed_columns(data)
        try:
            out = super().__call__(data, return_dict=return_dict)
        finally:
            self._group_ids = None
            self._answered = None
        if return_dict and isinstance(out, dict):
            info = out["reward_extra_info"]
            for key, name in (("judge_parse_failure", "parse"), ("judge_request_failure", "request")):
                if key in info:
                    info[f"reward/judge_{name}_failures"] = [int(np.nansum(info[key]))]
        return out

    def score_samples(self, samples: list[Sample]) -> list[Any]:
        """One ``{"score", "judge_score", ...}`` dict (or an Exception from the rule reward) per sample."""
        if self.judge.mode == "pairwise" and self._group_ids is None:
            raise ValueError(
                "reward_model.judge.mode=pairwise compares the responses of one prompt: the batch needs a 'uid' "
                "column (the GRPO group id, set by the trainer)"
            )
        group_ids = None
        if self._group_ids is not None:
            group_ids = [self._group_ids[s.index] for s in samples]
        judged = self._judged_during_rollout(samples)
        if judged is None:
            judged = self.judge.score(
                [s.prompt_str for s in samples],
                [s.response_str for s in samples],
                [s.ground_truth for s in samples],
                group_ids,
            )
        rule: list[Any] = [None] * len(samples)
        if self.rule_weight != 0.0:
            rule = super().score_samples(samples)
        out: list[Any] = []
        for sample, result, rule_raw in zip(samples, judged, rule):
            extras: dict[str, Any] = {
                "judge_score": float("nan") if result.score is None else result.score,
                "judge_latency_s": result.latency_s,
                "judge_parse_failure": int(result.parse_failures > 0),
                "judge_request_failure": int(result.request_failures > 0),
                "judge_skipped": int(result.score is None),
            }
            score = 0.0 if result.score is None else self.weight * result.score
            if self.rule_weight != 0.0:
                if isinstance(rule_raw, BaseException):
                    out.append(rule_raw)  # the manager's on_error decides, as for any rule reward
                    continue
                try:
                    rule_score, rule_extras = normalize_result(rule_raw)
                except Exception as e:
                    out.append(e)
                    continue
                extras.update({k: v for k, v in rule_extras.items() if k not in extras})
                extras["rule_score"] = rule_score
                score += self.rule_weight * rule_score
            if result.error and result.score is None:
                logger.warning("judge failed for sample %d: %s", sample.index, result.error)
            out.append({"score": score, **extras})
        return out

    # ------------------------------------------------------------------------- answers received during the rollout
    def _precomputed_columns(self, data: Any) -> dict[str, Any] | None:
        """The batch's judge columns from the rollout when every row has an answer or an error (pointwise only)."""
        from verl.rewards.judge.rollout_columns import ANSWER_KEY, DIGEST_KEY, ERROR_KEY, JUDGE_COLUMNS

        ntb = getattr(data, "non_tensor_batch", None)
        if self.judge.mode != "pointwise" or ntb is None or any(k not in ntb for k in JUDGE_COLUMNS):
            return None
        columns = {k: ntb[k] for k in JUDGE_COLUMNS}
        complete = all(
            (a is not None or e is not None) and d is not None
            for a, e, d in zip(columns[ANSWER_KEY], columns[ERROR_KEY], columns[DIGEST_KEY])
        )
        if not complete:
            logger.warning("judge: some rows were not judged during the rollout; judging the whole batch now")
            return None
        return columns

    def _judged_during_rollout(self, samples: list[Sample]) -> list[JudgeResult] | None:
        """Results from the rollout's answers when each was for the judge prompt built here, else None."""
        from verl.rewards.judge.rollout_columns import (
            ANSWER_KEY,
            DIGEST_KEY,
            ERROR_KEY,
            LATENCY_KEY,
            judge_text_digest,
        )

        cols = self._answered
        if cols is None:
            return None
        for s in samples:
            text = self.judge.pointwise_text(s.prompt_str, s.response_str, s.ground_truth)
            if judge_text_digest(text) != cols[DIGEST_KEY][s.index]:
                logger.warning(
                    "judge: sample %d's response differs from the one judged during the rollout; judging the whole "
                    "batch now",
                    s.index,
                )
                return None
        answers: list[str | BaseException] = [
            JudgeRequestError(str(cols[ERROR_KEY][s.index]))
            if cols[ANSWER_KEY][s.index] is None
            else str(cols[ANSWER_KEY][s.index])
            for s in samples
        ]
        self.reused_batches += 1
        return self.judge.score_answers(answers, [float(cols[LATENCY_KEY][s.index]) for s in samples])
