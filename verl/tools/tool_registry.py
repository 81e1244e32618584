"""Upstream verl v0.9's module path of the tool loader (January's is :mod:`verl.tools.utils.tool_registry`, where
the code lives): ``initialize_tools_from_config``, ``load_all_tools``, ``get_tool_class``."""

from verl.tools.utils.tool_registry import get_tool_class, initialize_tools_from_config, load_all_tools

__all__ = ["get_tool_class", "initialize_tools_from_config", "load_all_tools"]
