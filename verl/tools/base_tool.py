"""The tool interface of agent rollouts: ``BaseTool``, as verl defines it.

A tool config entry (``class_name``, ``config``, ``tool_schema``) builds one tool object per rollout worker; each
trajectory that may call it gets its own *instance* (``create``), which the loop uses for every call of that
trajectory (``execute``) and releases at the end (``calc_reward``, then ``release``). All methods are coroutines:
the agent loop runs many trajectories in one event loop, so a tool that blocks must hand its work to a thread
(``asyncio.to_thread``), as the built-in code interpreter does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from uuid import uuid4

from verl.base_config import BaseConfig
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["BaseTool", "ToolConfig", "ToolResult", "instance_id_of", "normalize_tool_result"]


@dataclass
class ToolConfig(BaseConfig):
    """A tool entry's ``config`` mapping (the tool YAML): ``type`` (``native``: a Python class; ``mcp``: the tools an
    MCP server lists). A tool with keys of its own subclasses this; its fields are the one home of their defaults
    (the tool reads ``omega_conf_to_dataclass(self.config, ItsConfig)``)."""

    type: Literal["native", "mcp"] = "native"


ToolResult = tuple[ToolResponse, float, dict[str, Any]]
"""What ``execute`` returns: the response shown to the model, the step reward, and the tool's own metrics."""


class BaseTool:
    """Base class of tools.

    Args:
        config: the entry's ``config`` mapping (``type: native`` plus the tool's own keys).
        tool_schema: the entry's ``tool_schema``; ``None`` asks the subclass's :meth:`get_openai_tool_schema`.
    """

    def __init__(self, config: dict[str, Any] | None, tool_schema: OpenAIFunctionToolSchema | None) -> None:
        self.config: dict[str, Any] = dict(config or {})
        self.tool_schema = tool_schema if tool_schema is not None else self.get_openai_tool_schema()
        if self.tool_schema is None:
            raise ValueError(f"{type(self).__name__}: no tool_schema given and the class defines no default schema")
        self.name: str = self.tool_schema.function.name

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema | None:
        """The tool's OpenAI function schema (what the chat template shows the model)."""
        return getattr(self, "tool_schema", None)

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Create the state of one trajectory's use of the tool; returns ``(instance_id, creation response)`` as
        verl's ``BaseTool`` does (the id is a new UUID when ``instance_id`` is None).

        ``kwargs`` are the sample's ``extra_info.tools_kwargs[<tool name>].create_kwargs`` (e.g. a ground truth).
        The agent loop uses the id (:func:`instance_id_of` also accepts a bare id, which tools written for earlier
        versions of this project return).
        """
        return (str(uuid4()) if instance_id is None else instance_id), ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ToolResult:
        """Run one call with the parsed JSON ``parameters``; returns ``(response, step_reward, metrics)``."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The instance's reward at the end of the trajectory (added to the sample's reward)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Free the instance's state."""
        return None


def normalize_tool_result(tool_name: str, result: Any) -> ToolResult:
    """``execute``'s return value as ``(ToolResponse, float, dict)``.

    Accepts verl's shapes: a ``ToolResponse``, a dict (``{"text": ...}``) or a plain string as the response.
    Anything else raises ``TypeError`` naming the tool (the loop turns it into an error message to the model).
    """
    if not (isinstance(result, tuple) and len(result) == 3):
        raise TypeError(f"tool {tool_name!r}: execute must return (response, reward, metrics), got {result!r:.200}")
    response, reward, metrics = result
    if isinstance(response, str):
        response = ToolResponse(text=response)
    elif isinstance(response, dict):
        response = ToolResponse(text=response.get("text"))
    elif not isinstance(response, ToolResponse):
        raise TypeError(f"tool {tool_name!r}: response must be a ToolResponse, dict or str, got {type(response)}")
    return response, float(reward or 0.0), dict(metrics or {})


def instance_id_of(tool_name: str, created: Any) -> str:
    """The instance id out of ``create``'s return value: ``(instance_id, ToolResponse)`` (verl's contract) or a bare
    id string. Anything else raises ``TypeError`` naming the tool."""
    if isinstance(created, tuple) and len(created) == 2 and isinstance(created[0], str):
        return created[0]
    if isinstance(created, str):
        return created
    raise TypeError(f"tool {tool_name!r}: create must return (instance_id, ToolResponse), got {created!r:.200}")
