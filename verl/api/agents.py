"""Tools and agent loops in the Python API: ``PPOTrainer(..., tools=[...], agent_loop=...)``.

:func:`resolve_agent_options` turns the two arguments into the ``main_ppo`` keys of a multi-turn rollout
(``actor_rollout_ref.rollout.multi_turn.*``, ``rollout.agent.default_agent_loop``, ``rollout.name=hf``,
``data.return_raw_chat``) and the tool objects handed to the rollout engine; :func:`add_raw_chat` gives a prompt
batch the ``raw_prompt`` column (the chat messages of each row) that the tool loop renders with the tool schemas.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["add_raw_chat", "resolve_agent_options"]


def resolve_agent_options(tools: Any, agent_loop: Any) -> tuple[dict[str, Any], list[Any]]:
    """``(dotted config keys, tool objects)`` for ``tools`` and ``agent_loop``; ``({}, [])`` when both are None.

    Args:
        tools: ``BaseTool`` objects, or the path of a tool-config YAML (``multi_turn.tool_config_path``), or None.
        agent_loop: a registered loop name (``"tool_agent"``, ``"single_turn_agent"``, yours), an
            ``AgentLoopBase`` subclass (registered under its class name), or None: ``tool_agent`` when tools are
            given.
    """
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, get_agent_loop_class, register
    from verl.tools.base_tool import BaseTool

    if tools is None and agent_loop is None:
        return {}, []
    keys: dict[str, Any] = {
        "actor_rollout_ref.rollout.multi_turn.enable": True,
        "actor_rollout_ref.rollout.name": "hf",
        "data.return_raw_chat": True,
    }
    objects: list[Any] = []
    if isinstance(tools, (str, os.PathLike)):
        if not os.path.isfile(tools):
            raise FileNotFoundError(f"PPOTrainer(tools={str(tools)!r}): no such tool-config file")
        keys["actor_rollout_ref.rollout.multi_turn.tool_config_path"] = os.fspath(tools)
    elif tools is not None:
        if isinstance(tools, BaseTool) or not isinstance(tools, Sequence):
            tools = [tools]
        for i, tool in enumerate(tools):
            if not isinstance(tool, BaseTool):
                raise TypeError(f"PPOTrainer(tools=...)[{i}]: expected a verl.tools.base_tool.BaseTool, got {tool!r}")
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"PPOTrainer(tools=...): tool names must be unique, got {names}")
        objects = list(tools)
    if agent_loop is None:
        name = "tool_agent"
    elif isinstance(agent_loop, type) and issubclass(agent_loop, AgentLoopBase):
        name = agent_loop.__name__
        register(name)(agent_loop)
    elif isinstance(agent_loop, str):
        name = agent_loop
        get_agent_loop_class(name)  # an unknown name fails here, listing the registered ones
    else:
        raise TypeError(
            f"PPOTrainer(agent_loop=...): a registered loop name or an AgentLoopBase subclass, got {agent_loop!r}"
        )
    keys["actor_rollout_ref.rollout.agent.default_agent_loop"] = name
    return keys, objects


def add_raw_chat(batch: Any, prompts: Any, prompt_key: str) -> Any:
    """``batch`` with a ``raw_prompt`` column: each row's chat messages (a string prompt becomes one user message).
    Token-id prompts have no messages and are refused, as the tool loop renders the conversation itself."""
    from verl.data.prompt_batch import prompt_items
    from verl.protocol import DataProto

    if isinstance(prompts, DataProto):
        if "raw_prompt" not in prompts.non_tensor_batch:
            raise ValueError("agent rollouts need a raw_prompt column (the chat messages) in the DataProto")
        return batch
    items, _ = prompt_items(prompts, prompt_key)
    messages = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            messages.append([{"role": "user", "content": item}])
        elif isinstance(item, (list, tuple)) and item and isinstance(item[0], Mapping):
            messages.append([dict(m) for m in item])
        else:
            raise TypeError(
                f"prompt row {i}: agent rollouts need a string or chat messages (the loop applies the chat template "
                f"with the tool schemas), got {type(item).__name__}"
            )
    column = np.empty(len(messages), dtype=object)
    column[:] = messages
    if len(column) != len(batch):
        raise ValueError(f"{len(column)} prompts but a batch of {len(batch)} rows")
    batch.non_tensor_batch["raw_prompt"] = column
    return batch
