"""Agent loops: multi-turn rollouts with tools and interactions (``actor_rollout_ref.rollout.multi_turn``).

See ``docs/agent_loop.md``. ``AgentLoopBase``/``register`` define loops; ``AgentLoopRunner`` runs a prompt batch
through them over request servers; ``AgentLoopManager`` (the driver's) holds the tools, interactions and judge and
gets the request servers from the actor worker group. The request servers themselves are the engines'
(:mod:`verl.workers.rollout.request_server`); ``verl.experimental.agent_loop.request_batcher`` is that same module
under its former name.
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported on first use (PEP 562): a plain run checks its agent settings (.settings) without importing the tool
# stack, the engines or torch.
_EXPORTS = {
    "AgentLoopBase": "agent_loop",
    "AgentLoopMetrics": "agent_loop",
    "AgentLoopOutput": "agent_loop",
    "AgentLoopSettings": "settings",
    "available_agent_loops": "agent_loop",
    "get_agent_loop_class": "agent_loop",
    "register": "agent_loop",
    "RequestBatcher": "request_batcher",
    "TokenOutput": "request_batcher",
    "AgentLoopManager": "manager",
    "AgentLoopRunner": "runner",
    "SingleTurnAgentLoop": "single_turn_agent_loop",
    "ToolAgentLoop": "tool_agent_loop",
    "FunctionCall": "tool_parser",
    "ToolParser": "tool_parser",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
