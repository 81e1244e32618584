"""An LLM judge as a reward: build judge prompts, ask a backend, parse verdicts, handle failures.

Pointwise: each (prompt, response) gets its own judge request; the parsed rating divided by ``max_score`` is the
score (in [0, 1]). Pairwise (for GRPO groups): every two responses of a group (rows sharing a group id, the
trainer's ``uid``) are compared once as (A, B) and, with ``both_orders``, once more as (B, A) to cancel position
bias; a response's score is its share of wins over its comparisons (in [0, 1]; a group of one scores 0.5).

A failed request or an unparsable answer follows ``on_error``: ``zero`` (score 0), ``skip`` (no judge score: the
reward manager leaves the judge term out of that sample's reward) or ``raise`` (the step fails, naming the sample).
In pairwise mode a failed comparison is dropped; a response whose comparisons all failed is a failure.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from verl.rewards.judge.templates import (
    TEMPLATES,
    JudgeParseError,
    check_template,
    pairwise_parser,
    pointwise_parser,
)
from verl.sections.reward_model import JudgeConfig

ON_ERROR_CHOICES = ("zero", "skip", "raise")


class JudgeError(RuntimeError):
    """A judge failure under ``on_error=raise``."""


class JudgeBackend(Protocol):
    """Anything that answers judge prompts: one answer string or Exception per prompt, in order."""

    def generate(self, texts: Sequence[str]) -> list[str | Exception]: ...


@dataclass
class JudgeResult:
    """One response's judgement: ``score`` (None when failed), ``parse_failures`` / ``request_failures`` (counts
    over its requests), ``latency_s`` (mean seconds of its requests' batch), ``error`` (the last failure)."""

    score: float | None
    parse_failures: int = 0
    request_failures: int = 0
    latency_s: float = 0.0
    error: str | None = None


class LLMJudge:
    """Score responses with a judge model.

    Args:
        backend: a :class:`JudgeBackend` (:class:`~verl.rewards.judge.backends.OpenAIJudgeBackend`,
            :class:`~verl.workers.judge_worker.HFJudgeBackend`, or any object with ``generate``).
        mode: ``pointwise`` or ``pairwise``.
        template: a format string (see :mod:`~verl.rewards.judge.templates`); None: the ready one.
        parse_fn: ``answer -> score`` (pointwise: in [0, 1]; pairwise: 1.0 if A is better, 0.0 if B), raising on an
            unusable answer; None: the ready parser for ``mode`` with ``score_pattern`` and ``max_score``.
        on_error: ``zero`` | ``skip`` | ``raise``.
        both_orders: pairwise only: also judge each pair with A and B swapped.
    """

    def __init__(
        self,
        backend: JudgeBackend,
        mode: str = JudgeConfig.mode,
        template: str | None = None,
        parse_fn: Callable[[str], float] | None = None,
        score_pattern: str | None = None,
        max_score: float = JudgeConfig.max_score,
        on_error: str = JudgeConfig.on_error,
        both_orders: bool = JudgeConfig.both_orders,
    ) -> None:
        if mode not in TEMPLATES:
            raise ValueError(f"reward_model.judge.mode must be one of {sorted(TEMPLATES)}, got {mode!r}")
        if on_error not in ON_ERROR_CHOICES:
            raise ValueError(f"reward_model.judge.on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}")
        self.backend = backend
        self.mode = mode
        self.template = check_template(template or TEMPLATES[mode], mode)
        if parse_fn is None:
            parse_fn = (
                pointwise_parser(score_pattern, max_score) if mode == "pointwise" else pairwise_parser(score_pattern)
            )
        self.parse_fn = parse_fn
        self.on_error = on_error
        self.both_orders = bool(both_orders)

    # ------------------------------------------------------------------------------------------------ requests
    def _ask(self, texts: list[str]) -> tuple[list[float | Exception], list[bool], float]:
        """Verdicts (or the Exception) per text, which failures were parse failures, and the mean latency."""
        start = time.perf_counter()
        answers = self.backend.generate(texts) if texts else []
        latency = (time.perf_counter() - start) / max(len(texts), 1)
        if len(answers) != len(texts):
            raise JudgeError(f"judge backend returned {len(answers)} answers for {len(texts)} prompts")
        verdicts, parse_failed = self._parse(answers)
        return verdicts, parse_failed, latency

    def _parse(self, answers: Sequence[str | BaseException]) -> tuple[list[float | Exception], list[bool]]:
        """Verdicts (or the Exception) per answer, and which failures were parse failures."""
        verdicts: list[float | Exception] = []
        parse_failed: list[bool] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                verdicts.append(answer)  # type: ignore[arg-type]
                parse_failed.append(False)
                continue
            try:
                value = float(self.parse_fn(answer))
                if not math.isfinite(value):
                    raise JudgeParseError(f"parser returned {value} for judge answer {answer!r:.200}")
                verdicts.append(value)
                parse_failed.append(False)
            except Exception as e:  # any parser error counts as unparsable
                verdicts.append(e if isinstance(e, JudgeParseError) else JudgeParseError(f"{type(e).__name__}: {e}"))
                parse_failed.append(True)
        return verdicts, parse_failed

    def _finish(self, results: list[JudgeResult]) -> list[JudgeResult]:
        for i, r in enumerate(results):
            if r.score is None and self.on_error == "raise":
                raise JudgeError(f"judge failed for sample {i} (reward_model.judge.on_error=raise): {r.error}")
            if r.score is None and self.on_error == "zero":
                r.score = 0.0
        return results

    # --------------------------------------------------------------------------------------------------- score
    def score(
        self,
        prompts: Sequence[str],
        responses: Sequence[str],
        ground_truths: Sequence[Any] | None = None,
        group_ids: Sequence[Any] | None = None,
    ) -> list[JudgeResult]:
        """One :class:`JudgeResult` per response. ``group_ids`` (one per response) is required in pairwise mode;
        ``ground_truths`` fill the ``{ground_truth}`` placeholder (empty when None)."""
        n = len(responses)
        if len(prompts) != n:
            raise ValueError(f"judge: {len(prompts)} prompts for {n} responses")
        truths = [None] * n if ground_truths is None else list(ground_truths)
        if self.mode == "pointwise":
            return self._finish(self._score_pointwise(prompts, responses, truths))
        if group_ids is None or len(group_ids) != n:
            raise ValueError("judge mode=pairwise needs one group id (uid) per response to compare within groups")
        return self._finish(self._score_pairwise(prompts, responses, truths, group_ids))

    def pointwise_text(self, prompt: str, response: str, ground_truth: Any = None) -> str:
        """The pointwise judge prompt of one response: the template filled with ``prompt``, ``response`` and
        ``ground_truth`` (empty when None). Used for the requests of :meth:`score` and of the agent loops' judge
        (``verl.experimental.agent_loop.judge_overlap``), so both send the same text."""
        return self.template.format(
            prompt=prompt, response=response, ground_truth="" if ground_truth is None else ground_truth
        )

    def score_answers(self, answers: Sequence[str | BaseException], latencies: Sequence[float]) -> list[JudgeResult]:
        """Pointwise results from answers already received (an answer string or the request's Exception per
        response, and each request's seconds): the parser and ``on_error`` of :meth:`score`."""
        if self.mode != "pointwise":
            raise ValueError("LLMJudge.score_answers: only pointwise answers stand for one response each")
        if len(answers) != len(latencies):
            raise ValueError(f"judge: {len(answers)} answers for {len(latencies)} latencies")
        verdicts, parse_failed = self._parse(answers)
        return self._finish(self._pointwise_results(verdicts, parse_failed, latencies))

    def _score_pointwise(
        self, prompts: Sequence[str], responses: Sequence[str], truths: Sequence[Any]
    ) -> list[JudgeResult]:
        texts = [self.pointwise_text(p, r, g) for p, r, g in zip(prompts, responses, truths)]
        verdicts, parse_failed, latency = self._ask(texts)
        return self._pointwise_results(verdicts, parse_failed, [latency] * len(texts))

    @staticmethod
    def _pointwise_results(
        verdicts: Sequence[float | Exception], parse_failed: Sequence[bool], latencies: Sequence[float]
    ) -> list[JudgeResult]:
        results = []
        for verdict, parse_fail, latency in zip(verdicts, parse_failed, latencies):
            if isinstance(verdict, BaseException):
                results.append(
                    JudgeResult(
                        None,
                        parse_failures=int(parse_fail),
                        request_failures=int(not parse_fail),
                        latency_s=float(latency),
                        error=f"{type(verdict).__name__}: {verdict}",
                    )
                )
            else:
                results.append(JudgeResult(float(verdict), latency_s=float(latency)))
        return results

    def _score_pairwise(
        self, prompts: Sequence[str], responses: Sequence[str], truths: Sequence[Any], group_ids: Sequence[Any]
    ) -> list[JudgeResult]:
        groups: dict[Any, list[int]] = defaultdict(list)
        for i, g in enumerate(group_ids):
            groups[g].append(i)
        pairs: list[tuple[int, int]] = []  # (row shown as A, row shown as B)
        for rows in groups.values():
            for x in range(len(rows)):
                for y in range(x + 1, len(rows)):
                    pairs.append((rows[x], rows[y]))
                    if self.both_orders:
                        pairs.append((rows[y], rows[x]))
        texts = [
            self.template.format(
                prompt=prompts[a],
                response_a=responses[a],
                response_b=responses[b],
                ground_truth="" if truths[a] is None else truths[a],
            )
            for a, b in pairs
        ]
        verdicts, parse_failed, latency = self._ask(texts)
        wins = [0.0] * len(responses)
        played = [0] * len(responses)
        results = [JudgeResult(None, latency_s=latency) for _ in responses]
        for (a, b), verdict, parse_fail in zip(pairs, verdicts, parse_failed):
            if isinstance(verdict, BaseException):
                for row in (a, b):
                    results[row].parse_failures += int(parse_fail)
                    results[row].request_failures += int(not parse_fail)
                    results[row].error = f"{type(verdict).__name__}: {verdict}"
                continue
            wins[a] += float(verdict)
            wins[b] += 1.0 - float(verdict)
            played[a] += 1
            played[b] += 1
        for rows in groups.values():
            for row in rows:
                if len(rows) == 1:
                    results[row].score = 0.5  # nobody to compare with: neutral
                elif played[row]:
                    results[row].score = wins[row] / played[row]
        return results
