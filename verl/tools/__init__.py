"""Tools a model calls during multi-turn rollouts (``rollout.multi_turn.tool_config_path``).

``BaseTool`` is the interface; built in: ``calculator_tool.CalculatorTool``, ``code_interpreter_tool.
CodeInterpreterTool`` (Python in the project's sandbox), ``local_search_tool.LocalSearchTool`` (BM25 over a corpus
file) and ``gsm8k_tool.Gsm8kTool``. ``utils.tool_registry.initialize_tools_from_config`` loads a tool-config file.
"""

from verl.tools.base_tool import BaseTool, ToolResult
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["BaseTool", "OpenAIFunctionToolSchema", "ToolResponse", "ToolResult"]
