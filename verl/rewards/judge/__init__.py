"""LLM-as-judge rewards: templates and parsers, backends (an OpenAI-compatible endpoint or the trainer's ``judge``
worker group), and :class:`LLMJudge`, used by the ``judge`` reward manager (``reward_model.reward_manager=judge``).

The in-process backend (``reward_model.judge.backend=hf``) drives the workers' ``hf`` engine, so it lives on their
floor: :class:`verl.workers.judge_worker.HFJudgeBackend`. :class:`LLMJudge` takes any backend (an object with
``generate(texts)``), so nothing here imports the workers."""

from verl.rewards.judge.backends import (
    JudgeRequestError,
    OpenAIJudgeBackend,
    WorkerGroupJudgeBackend,
)
from verl.rewards.judge.judge import JudgeBackend, JudgeError, JudgeResult, LLMJudge
from verl.rewards.judge.templates import (
    PAIRWISE_TEMPLATE,
    POINTWISE_TEMPLATE,
    JudgeParseError,
    pairwise_parser,
    pointwise_parser,
)

__all__ = [
    "JudgeBackend",
    "JudgeError",
    "JudgeParseError",
    "JudgeRequestError",
    "JudgeResult",
    "LLMJudge",
    "OpenAIJudgeBackend",
    "PAIRWISE_TEMPLATE",
    "POINTWISE_TEMPLATE",
    "WorkerGroupJudgeBackend",
    "pairwise_parser",
    "pointwise_parser",
]
