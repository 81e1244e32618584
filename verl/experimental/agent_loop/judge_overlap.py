"""Judge each trajectory as soon as its agent loop ends, while the batch's other trajectories still generate.

With ``reward_model.judge.overlap_rollout=true`` (a pointwise judge over an OpenAI-compatible endpoint) the driver's
:class:`~verl.experimental.agent_loop.manager.AgentLoopManager` builds a :class:`JudgeOverlap` for its runner. For
each batch it opens a :class:`JudgeBatch`; a row whose loop has finished is submitted at once: its judge prompt
(``LLMJudge.pointwise_text`` of the strings ``decode_prompt_response`` gives, exactly what the ``judge`` reward
manager builds from the finished batch) goes to a thread pool of ``max_concurrency`` threads shared by the whole
batch, whatever worker thread ran the trajectory, so the bound holds across the batch and a request does not
depend on the event loop of a worker thread that may already have ended. The runner waits for the outstanding
requests before it returns; the output batch carries, per row, the columns of :data:`JUDGE_COLUMNS`, which the
reward manager parses instead of asking again (``verl.workers.reward_manager.judge``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from verl.base_config import omega_conf_to_dataclass
from verl.rewards.judge import LLMJudge, OpenAIJudgeBackend
from verl.rewards.judge.rollout_columns import (
    ANSWER_KEY,
    DIGEST_KEY,
    ERROR_KEY,
    JUDGE_COLUMNS,
    LATENCY_KEY,
    judge_text_digest,
)
from verl.sections.reward_model import JudgeConfig
from verl.workers.reward_manager.abstract import decode_prompt_response

__all__ = [
    "JUDGE_COLUMNS",
    "JudgeBatch",
    "JudgeOverlap",
    "judge_overlap_config",
    "judge_text_digest",
    "overlap_config_errors",
]


def judge_overlap_config(config: Any) -> dict[str, Any] | None:
    """The ``reward_model.judge`` section as a plain dict when a run's config (the whole trainer config) turns
    ``overlap_rollout`` on for the judge reward manager, else None: the agent-loop manager's judge is built from it."""
    from omegaconf import OmegaConf

    if OmegaConf.select(config, "reward_model.reward_manager") != "judge":
        return None
    if not OmegaConf.select(config, "reward_model.judge.overlap_rollout"):  # absent or null: off
        return None
    section = OmegaConf.select(config, "reward_model.judge")
    return OmegaConf.to_container(section, resolve=True) if OmegaConf.is_config(section) else dict(section)


def overlap_config_errors(config: Any) -> list[str]:
    """Why a run's config (the whole trainer config) cannot judge during the rollout, one message per problem, each
    naming ``reward_model.judge.overlap_rollout`` (empty when the key is off or fits): it needs the ``judge``
    reward manager, ``backend=openai`` (an endpoint the agent loops call), ``mode=pointwise`` (one request per
    response; a pairwise judge compares a group's finished responses) and multi-turn rollouts."""
    from omegaconf import OmegaConf

    def get(key: str) -> Any:
        return OmegaConf.select(config, key)

    # a partial judge section (the Python API) is completed from JudgeConfig, the one home of its defaults
    judge = omega_conf_to_dataclass(get("reward_model.judge"), JudgeConfig)
    if not judge.overlap_rollout:
        return []
    key, errors = "reward_model.judge.overlap_rollout=true", []
    if get("reward_model.reward_manager") != "judge":
        errors.append(
            f"{key} judges for the judge reward manager: set reward_model.reward_manager=judge "
            f"(got {get('reward_model.reward_manager')!r}) or drop the key"
        )
    if judge.backend != "openai":
        errors.append(
            f"{key} needs reward_model.judge.backend=openai (an endpoint the agent loops call), got "
            f"backend={get('reward_model.judge.backend')}"
        )
    if judge.mode != "pointwise":
        errors.append(
            f"{key} needs reward_model.judge.mode=pointwise (a pairwise judge compares the finished responses of a "
            f"group), got mode={get('reward_model.judge.mode')}"
        )
    if not (get("actor_rollout_ref.rollout.multi_turn.enable") or get("actor_rollout_ref.rollout.mode") == "async"):
        errors.append(
            f"{key} judges agent-loop trajectories as they end: it needs "
            "actor_rollout_ref.rollout.multi_turn.enable=true (or rollout.mode=async)"
        )
    return errors


class JudgeBatch:
    """One rollout batch's judge requests: :meth:`submit` per finished row, then :meth:`collect` once."""

    def __init__(self, judge: LLMJudge, tokenizer: Any, ground_truths: list[Any]) -> None:
        self.judge = judge
        self.tokenizer = tokenizer
        self.ground_truths = ground_truths
        backend: OpenAIJudgeBackend = judge.backend  # type: ignore[assignment]
        self.backend = backend
        self.pool = ThreadPoolExecutor(max_workers=backend.max_concurrency, thread_name_prefix="judge-overlap")
        self.futures: list[Future[tuple[str | None, str | None, float]] | None] = [None] * len(ground_truths)
        self.digests: list[str | None] = [None] * len(ground_truths)

    def submit(self, index: int, prompt_ids: list[int], response_ids: list[int]) -> None:
        """Send row ``index``'s judge request (returns at once; the request waits for a free pool thread)."""
        prompt_str, response_str = decode_prompt_response(self.tokenizer, prompt_ids, response_ids)
        text = self.judge.pointwise_text(prompt_str, response_str, self.ground_truths[index])
        self.digests[index] = judge_text_digest(text)
        self.futures[index] = self.pool.submit(self._request, text)

    def _request(self, text: str) -> tuple[str | None, str | None, float]:
        start = time.perf_counter()
        try:
            answer: str | None = self.backend.request(text)
            error: str | None = None
        except Exception as e:  # one row's failure: the reward manager's on_error decides
            answer, error = None, f"{type(e).__name__}: {e}"
        return answer, error, time.perf_counter() - start

    def collect(self) -> dict[str, np.ndarray]:
        """Wait for every request sent and return the :data:`JUDGE_COLUMNS` (a row never submitted, e.g. one
        whose loop failed, has None answer and error: the reward manager then judges the batch itself)."""
        n = len(self.futures)
        columns = {key: np.empty(n, dtype=object) for key in JUDGE_COLUMNS}
        try:
            for i, future in enumerate(self.futures):
                answer, error, latency = (None, None, float("nan")) if future is None else future.result()
                columns[ANSWER_KEY][i] = answer
                columns[ERROR_KEY][i] = error
                columns[LATENCY_KEY][i] = latency
                columns[DIGEST_KEY][i] = self.digests[i]
        finally:
            self.close()
        return columns

    def close(self) -> None:
        """Drop the requests not started yet and wait for those in flight (an error path ends the batch)."""
        self.pool.shutdown(wait=True, cancel_futures=True)


class JudgeOverlap:
    """The rollout side of ``reward_model.judge.overlap_rollout``: a pointwise :class:`LLMJudge` over an
    :class:`OpenAIJudgeBackend` (built from the ``reward_model.judge`` section with :meth:`from_config`)."""

    def __init__(self, judge: LLMJudge) -> None:
        if judge.mode != "pointwise":
            raise ValueError("reward_model.judge.overlap_rollout needs reward_model.judge.mode=pointwise")
        if not isinstance(judge.backend, OpenAIJudgeBackend):
            raise ValueError("reward_model.judge.overlap_rollout needs reward_model.judge.backend=openai")
        self.judge = judge

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> JudgeOverlap:
        """From the ``reward_model.judge`` mapping (see ``JudgeConfig``), as the reward manager builds its judge."""
        from verl.workers.reward_manager.judge import build_judge

        return cls(build_judge(config))

    def open_batch(self, tokenizer: Any, ground_truths: list[Any]) -> JudgeBatch:
        """A :class:`JudgeBatch` for one rollout batch (one ground truth, or None, per row)."""
        return JudgeBatch(self.judge, tokenizer, ground_truths)
