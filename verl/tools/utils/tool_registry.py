"""Load tools from a tool-config YAML file in verl's format (``rollout.multi_turn.tool_config_path``)::

    tools:
      - class_name: verl.tools.calculator_tool.CalculatorTool
        config:
          type: native
        tool_schema:            # optional when the class has a default schema
          type: function
          function:
            name: calculator
            description: Evaluate an arithmetic expression.
            parameters:
              type: object
              properties:
                expression: {type: string, description: "e.g. 12 * (3 + 4)"}
              required: [expression]

An entry of ``type: mcp`` stands for the tools of MCP servers (:mod:`verl.tools.mcp_base_tool`)::

      - class_name: verl.tools.mcp_base_tool.MCPBaseTool
        config: {type: mcp, timeout: 30, rate_limit: 10}
        mcp:
          mcp_servers_config_path: mcp_servers.json     # relative: to the working directory, else to this file
          tool_selected_list: [multiply]                # optional: only these of the servers' tools

Any other type is refused with the entry named.
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import ValidationError

from verl.base_config import omega_conf_to_dataclass
from verl.tools.base_tool import BaseTool, ToolConfig
from verl.tools.schemas import OpenAIFunctionToolSchema
from verl.utils.import_utils import load_class

__all__ = ["get_tool_class", "initialize_tools_from_config", "load_all_tools", "load_class"]


def get_tool_class(cls_name: str) -> type[BaseTool]:
    """The tool class at the dotted path ``cls_name``."""
    return load_class(cls_name, "tool")


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node


def initialize_tools_from_config(tools_config_file: str) -> list[BaseTool]:
    """Build every tool of ``tools_config_file``; names must be unique. Errors name the file, entry and key."""
    if not os.path.isfile(tools_config_file):
        raise FileNotFoundError(f"tool config {tools_config_file!r} (rollout.multi_turn.tool_config_path) not found")
    raw = _plain(OmegaConf.load(tools_config_file))
    if not isinstance(raw, dict) or not isinstance(raw.get("tools"), list):
        raise ValueError(f"{tools_config_file}: expected a top-level 'tools:' list of tool entries")
    tools: list[BaseTool] = []
    for i, entry in enumerate(raw["tools"]):
        where = f"{tools_config_file}: tools[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(f"{where}: each entry needs class_name (and config, tool_schema); got {entry!r}")
        config = entry.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"{where}.config must be a mapping, got {config!r}")
        tool_type = str(omega_conf_to_dataclass(config, ToolConfig).type)
        if tool_type not in ("native", "mcp"):
            raise ValueError(f"{where}.config.type={tool_type!r}: one of 'native', 'mcp'")
        cls = load_class(entry["class_name"], where)
        if not issubclass(cls, BaseTool):
            raise ValueError(f"{where}: {entry['class_name']} is not a subclass of verl.tools.base_tool.BaseTool")
        if tool_type == "mcp":
            new = _mcp_tools(cls, config, entry.get("mcp"), tools_config_file, where)
        else:
            new = [_native_tool(cls, config, entry, where)]
        for tool in new:
            if any(t.name == tool.name for t in tools):
                raise ValueError(f"{where}: a tool named {tool.name!r} is already defined in this file")
            tools.append(tool)
    return tools


def load_all_tools(tool_config_path: str | None, function_tool_path: str | None) -> list[BaseTool]:
    """The tools of ``multi_turn.tool_config_path`` (this file's format) followed by the ``@function_tool`` tools
    of ``multi_turn.function_tool_path`` (:mod:`verl.tools.function_tool`); either may be None. A name defined in
    both raises ``ValueError`` naming it and both paths. Function-tool files load once per process, so calling this
    again returns the same function tools (and fresh native tool objects)."""
    tools = initialize_tools_from_config(tool_config_path) if tool_config_path else []
    if function_tool_path:
        from verl.tools.function_tool import load_function_tools_from_path

        native = {t.name for t in tools}
        function_tools = load_function_tools_from_path(function_tool_path)
        clash = sorted(t.name for t in function_tools if t.name in native)
        if clash:
            raise ValueError(
                f"two agent tools are named {clash[0]!r}: tool name(s) {clash} collide, defined both in "
                f"multi_turn.tool_config_path={tool_config_path!r} and multi_turn.function_tool_path="
                f"{function_tool_path!r}; rename one of them"
            )
        tools.extend(function_tools)
    return tools


def _native_tool(cls: type[BaseTool], config: dict[str, Any], entry: dict[str, Any], where: str) -> BaseTool:
    schema = None
    if entry.get("tool_schema") is not None:
        try:
            schema = OpenAIFunctionToolSchema.model_validate(entry["tool_schema"])
        except ValidationError as e:
            raise ValueError(f"{where}.tool_schema is not an OpenAI function schema: {e}") from e
    try:
        return cls(config=config, tool_schema=schema)
    except (TypeError, ValueError, OSError) as e:
        raise ValueError(f"{where} ({entry['class_name']}): {e}") from e


def _mcp_tools(cls: type[BaseTool], config: dict[str, Any], mcp: Any, config_file: str, where: str) -> list[BaseTool]:
    """The tools of an entry of ``type: mcp`` (its servers connected once per process)."""
    from verl.tools.mcp_base_tool import MCPBaseTool, load_mcp_tools

    if not issubclass(cls, MCPBaseTool):
        raise ValueError(f"{where}: config.type=mcp needs a subclass of verl.tools.mcp_base_tool.MCPBaseTool")
    if not isinstance(mcp, dict) or not mcp.get("mcp_servers_config_path"):
        raise ValueError(f"{where}: config.type=mcp needs an 'mcp:' mapping with mcp_servers_config_path")
    path = str(mcp["mcp_servers_config_path"])
    if not os.path.isabs(path) and not os.path.exists(path):
        path = os.path.join(os.path.dirname(os.path.abspath(config_file)), path)
    selected = mcp.get("tool_selected_list")
    if selected is not None and not (isinstance(selected, list) and all(isinstance(n, str) for n in selected)):
        raise ValueError(f"{where}.mcp.tool_selected_list must be a list of tool names, got {selected!r}")
    try:
        return load_mcp_tools(path, cls, config, selected, where)
    except (FileNotFoundError, ConnectionError) as e:
        raise ValueError(f"{where}: {e}") from e
