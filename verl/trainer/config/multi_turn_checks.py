"""Checks of ``actor_rollout_ref.rollout.multi_turn.*`` and ``rollout.agent.*`` (agent-loop rollouts)."""

from __future__ import annotations

import os

from omegaconf import DictConfig

from verl.sections.rollout import agent_loops_on

__all__ = ["check_agent_source", "check_multi_turn", "trace_problems"]

MT = "actor_rollout_ref.rollout.multi_turn"
AGENT = "actor_rollout_ref.rollout.agent"


def trace_problems(trace: DictConfig) -> list[str]:
    """One line per ``rollout.trace`` key we cannot honour: a trace backend (weave / mlflow spans of every
    agent-loop call) is not implemented here, and its sub-keys do nothing without one."""
    key = "actor_rollout_ref.rollout.trace"
    instead = "use trainer.rollout_data_dir=DIR (each step's prompts, responses and scores as JSONL)"
    if trace.backend is not None:
        return [f"{key}.backend={trace.backend}: rollout tracing is not implemented here; {instead}"]
    return [
        f"{key}.{name}={trace[name]}: only applies with a trace backend, which is not implemented here; {instead}"
        for name, default in (("token2text", False), ("max_samples_per_step_per_worker", None))
        if trace[name] != default
    ]


def check_multi_turn(cfg: DictConfig, errors: list[str], warns: list[str]) -> None:
    """Ranges and files of the multi-turn keys; with ``enable`` loops that read chat
    messages need ``data.return_raw_chat``. Keys set while ``enable`` is false are a warning (they do nothing)."""
    from verl.experimental.agent_loop.settings import AgentLoopSettings
    from verl.experimental.agent_loop.tool_parser import ToolParser

    rollout = cfg.actor_rollout_ref.rollout
    mt, agent = rollout.multi_turn, rollout.agent
    errors.extend(trace_problems(rollout.trace))
    settings = AgentLoopSettings.from_rollout_config(rollout, validate=False)
    errors.extend(settings.problems())
    if settings.format not in ToolParser.available():
        errors.append(f"{MT}.format={settings.format!r} is unknown; known formats: {ToolParser.available()}")
    files = [
        (f"{MT}.tool_config_path", mt.tool_config_path),
        (f"{MT}.function_tool_path", mt.function_tool_path),
        (f"{MT}.interaction_config_path", mt.interaction_config_path),
        (f"{AGENT}.agent_loop_config_path", agent.agent_loop_config_path),
    ]
    for key, path in files:
        if path is not None and not os.path.isfile(str(path)):
            errors.append(f"{key}={path!r}: no such file")
    if not agent_loops_on(rollout):
        set_keys = [key for key, path in files if path is not None]
        if set_keys:
            warns.append(
                f"{', '.join(set_keys)} set while {MT}.enable=false: they take effect only with enable=true "
                "(or actor_rollout_ref.rollout.mode=async)"
            )
        return
    # Only here: listing the loops imports the built-in ones, and with them the tools (pydantic), which a run
    # without agent loops does not need.
    from verl.experimental.agent_loop.agent_loop import available_agent_loops

    loop_path = agent.agent_loop_config_path
    if loop_path is None and settings.default_agent_loop not in available_agent_loops():
        errors.append(
            f"{AGENT}.default_agent_loop={settings.default_agent_loop!r} is not a registered agent loop "
            f"({available_agent_loops()}); list your own in {AGENT}.agent_loop_config_path"
        )
    openai = agent.openai
    if settings.default_agent_loop == "openai_agent" or openai.agent is not None or openai.command is not None:
        from verl.experimental.agent_loop.openai_agent.loop import config_problems

        errors.extend(config_problems(openai, str(cfg.reward_model.reward_manager)))
    tools_or_interactions = mt.tool_config_path or mt.function_tool_path or mt.interaction_config_path
    reads_chat = tools_or_interactions or settings.default_agent_loop != "single_turn_agent"
    if reads_chat and not cfg.data.return_raw_chat:
        errors.append(
            f"{MT}.enable=true with tools, interactions or agent loop {settings.default_agent_loop!r}: the loops "
            f"read each prompt's chat messages; set data.return_raw_chat=true"
        )


def check_agent_source(cfg: DictConfig) -> None:
    """At run start, before any model loads: the agent ``rollout.agent.openai.agent`` names exists (a file, or a
    module on ``sys.path``), so a typo fails in one line instead of at the first rollout.

    Not part of the config checks: ``--cfg job`` shows a config whose files may live on another machine.
    Raises :class:`~verl.utils.errors.UserCodeNotFoundError`."""
    from verl.utils.errors import UserCodeNotFoundError

    rollout = cfg.actor_rollout_ref.rollout
    agent = rollout.get("agent")
    if not agent_loops_on(rollout) or agent is None or agent.openai.agent is None:
        return
    from verl.experimental.agent_loop.openai_agent.agents import agent_source_problem

    problem = agent_source_problem(str(agent.openai.agent))
    if problem is not None:
        raise UserCodeNotFoundError(problem)
