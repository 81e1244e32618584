"""LLM-as-judge rewards: templates and parsers, backends (OpenAI-compatible endpoint, in-process ``hf`` engine or
the trainer's ``judge`` worker group), and :class:`LLMJudge`, used by the ``judge`` reward manager
(``reward_model.reward_manager=judge``)."""

from verl.rewards.judge.backends import (
    HFJudgeBackend,
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
    "HFJudgeBackend",
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
