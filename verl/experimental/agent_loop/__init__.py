"""Agent loops: multi-turn rollouts with tools and interactions (``actor_rollout_ref.rollout.multi_turn``).

See ``docs/agent_loop.md``. ``AgentLoopBase``/``register`` define loops; ``AgentLoopRunner`` runs a prompt batch
through them over a rollout engine; ``RequestBatcher`` batches the loops' generation requests.
"""

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopOutput,
    AgentLoopSettings,
    available_agent_loops,
    get_agent_loop_class,
    register,
)
from verl.experimental.agent_loop.request_batcher import RequestBatcher, TokenOutput
from verl.experimental.agent_loop.runner import AgentLoopRunner
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser

__all__ = [
    "AgentLoopBase",
    "AgentLoopOutput",
    "AgentLoopRunner",
    "AgentLoopSettings",
    "FunctionCall",
    "RequestBatcher",
    "SingleTurnAgentLoop",
    "TokenOutput",
    "ToolAgentLoop",
    "ToolParser",
    "available_agent_loops",
    "get_agent_loop_class",
    "register",
]
