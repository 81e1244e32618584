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

Only ``type: native`` tools exist in this version; any other type is refused with the entry named.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import ValidationError

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema

__all__ = ["get_tool_class", "initialize_tools_from_config", "load_class"]


def load_class(class_name: str, where: str) -> type:
    """Import ``package.module.ClassName``; errors name ``where`` (the config file and entry)."""
    if not isinstance(class_name, str) or "." not in class_name:
        raise ValueError(f"{where}: class_name={class_name!r} must be a dotted path such as pkg.module.ClassName")
    module_name, attr = class_name.rsplit(".", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"{where}: class_name={class_name!r}: cannot import module {module_name!r}: {e}") from e
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ValueError(f"{where}: class_name={class_name!r}: module {module_name!r} has no class {attr!r}")
    return cls


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
        tool_type = str(config.get("type", "native"))
        if tool_type != "native":
            raise ValueError(f"{where}.config.type={tool_type!r}: only 'native' tools are supported in this version")
        cls = load_class(entry["class_name"], where)
        if not issubclass(cls, BaseTool):
            raise ValueError(f"{where}: {entry['class_name']} is not a subclass of verl.tools.base_tool.BaseTool")
        schema = None
        if entry.get("tool_schema") is not None:
            try:
                schema = OpenAIFunctionToolSchema.model_validate(entry["tool_schema"])
            except ValidationError as e:
                raise ValueError(f"{where}.tool_schema is not an OpenAI function schema: {e}") from e
        try:
            tool = cls(config=config, tool_schema=schema)
        except (TypeError, ValueError, OSError) as e:
            raise ValueError(f"{where} ({entry['class_name']}): {e}") from e
        if any(t.name == tool.name for t in tools):
            raise ValueError(f"{where}: a tool named {tool.name!r} is already defined in this file")
        tools.append(tool)
    return tools
