"""What an agent loop reads from the rollout section: :class:`AgentLoopSettings` (``multi_turn.*``, ``agent.*``,
the lengths) and the valid values of its enumerated keys.

Its own module, without torch or the engines, because the config checks read it for every run
(:mod:`verl.trainer.config.multi_turn_checks`), including ``--cfg job``, which must stay quick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["SANITY_MODES", "TRUNCATE_SIDES", "AgentLoopSettings", "SanityMode"]

SanityMode = Literal["strict", "ignore_strippable", "disable"]
SANITY_MODES = ("strict", "ignore_strippable", "disable")
TRUNCATE_SIDES = ("left", "right", "middle")


@dataclass(frozen=True)
class AgentLoopSettings:
    """What a loop reads from ``actor_rollout_ref.rollout`` (``multi_turn.*``, ``agent.*``, the lengths), built by
    :meth:`from_rollout_config`; the defaults live in the config dataclasses (``MultiTurnConfig``, ``AgentConfig``)."""

    prompt_length: int
    response_length: int
    max_assistant_turns: int | None
    max_user_turns: int | None
    max_parallel_calls: int
    max_tool_response_length: int
    tool_response_truncate_side: str
    format: str
    tokenization_sanity_check_mode: SanityMode
    default_agent_loop: str
    num_workers: int
    openai: Any = None  # agent.openai (OpenAIAgentConfig): the openai_agent loop's settings
    # data.apply_chat_template_kwargs: extra chat-template arguments of every prompt and turn the loops render
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_rollout_config(
        cls, rollout: Any, validate: bool = True, chat_template_kwargs: dict[str, Any] | None = None
    ) -> AgentLoopSettings:
        """Read the settings from a complete rollout section (a ``RolloutConfig``, or the validated ``DictConfig``)
        and, with ``validate``, raise ValueError listing :meth:`problems`. ``chat_template_kwargs``: the data
        section's ``apply_chat_template_kwargs``, so the loops render prompts as the dataset does."""
        section = rollout
        mt, agent = section.multi_turn, section.agent
        settings = cls(
            prompt_length=int(section.prompt_length),
            response_length=int(section.response_length),
            max_assistant_turns=mt.max_assistant_turns,
            max_user_turns=mt.max_user_turns,
            max_parallel_calls=int(mt.max_parallel_calls),
            max_tool_response_length=int(mt.max_tool_response_length),
            tool_response_truncate_side=str(mt.tool_response_truncate_side),
            format=str(mt.format),
            tokenization_sanity_check_mode=str(mt.tokenization_sanity_check_mode),
            default_agent_loop=str(agent.default_agent_loop),
            num_workers=int(agent.num_workers),
            openai=agent.openai,
            chat_template_kwargs=dict(chat_template_kwargs or {}),
        )
        problems = settings.problems() if validate else []
        if problems:
            raise ValueError("; ".join(problems))
        return settings

    def problems(self) -> list[str]:
        """Invalid values, one message each naming the key (empty when valid)."""
        key = "actor_rollout_ref.rollout.multi_turn"
        out = []
        for name in ("max_assistant_turns", "max_user_turns"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                out.append(f"{key}.{name}={value!r} must be null (no limit) or an integer >= 1")
        if self.max_parallel_calls < 1:
            out.append(f"{key}.max_parallel_calls={self.max_parallel_calls} must be >= 1")
        if self.max_tool_response_length < 1:
            out.append(f"{key}.max_tool_response_length={self.max_tool_response_length} must be >= 1")
        if self.tool_response_truncate_side not in TRUNCATE_SIDES:
            side = self.tool_response_truncate_side
            out.append(f"{key}.tool_response_truncate_side={side!r}: one of {TRUNCATE_SIDES}")
        if self.tokenization_sanity_check_mode not in SANITY_MODES:
            mode = self.tokenization_sanity_check_mode
            out.append(f"{key}.tokenization_sanity_check_mode={mode!r}: one of {SANITY_MODES}")
        if self.num_workers < 1:
            out.append(f"actor_rollout_ref.rollout.agent.num_workers={self.num_workers} must be >= 1")
        return out
