"""A Python code interpreter tool that runs the model's code in the project's sandbox (``verl.sandbox``).

Each call runs in a fresh jail (no network, memory and time limits); the tool answers with the program's standard
output, and its standard error when it failed. The run happens in a thread so other trajectories keep going.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from verl.base_config import omega_conf_to_dataclass
from verl.sandbox import SandboxUnavailableError, run_python_sandboxed
from verl.tools.base_tool import BaseTool, ToolConfig, ToolResult
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["CodeInterpreterTool"]


@dataclass
class CodeInterpreterToolConfig(ToolConfig):
    """``config`` of a code_interpreter tool entry."""

    timeout_s: float = 10.0
    memory_mb: int = 512
    max_output_chars: int = 4096  # longer output is cut and marked


class CodeInterpreterTool(BaseTool):
    """``code_interpreter(code)``: run a Python program and read what it printed.

    Config keys (besides ``type``, defaults in :class:`CodeInterpreterToolConfig`): ``timeout_s``, ``memory_mb``,
    ``max_output_chars``. Metrics of a call: ``ok``, ``timed_out``, ``duration_s``.
    """

    def __init__(self, config: dict[str, Any] | None, tool_schema: OpenAIFunctionToolSchema | None) -> None:
        super().__init__(config, tool_schema)
        known = {"type", "timeout_s", "memory_mb", "max_output_chars"}
        unknown = sorted(set(self.config) - known)
        if unknown:
            raise ValueError(f"CodeInterpreterTool: unknown config keys {unknown}; known: {sorted(known)}")
        cfg = omega_conf_to_dataclass(self.config, CodeInterpreterToolConfig)
        self.timeout_s = float(cfg.timeout_s)
        self.memory_mb = int(cfg.memory_mb)
        self.max_output_chars = int(cfg.max_output_chars)
        if self.timeout_s <= 0 or self.memory_mb <= 0 or self.max_output_chars <= 0:
            raise ValueError(
                f"CodeInterpreterTool: timeout_s={self.timeout_s}, memory_mb={self.memory_mb} and "
                f"max_output_chars={self.max_output_chars} must be > 0"
            )

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "code_interpreter",
                    "description": "Run a Python program and return what it prints to standard output.",
                    "parameters": {
                        "type": "object",
                        "properties": {"code": {"type": "string", "description": "the Python source to run"}},
                        "required": ["code"],
                    },
                },
            }
        )

    def _cut(self, text: str) -> str:
        return text if len(text) <= self.max_output_chars else text[: self.max_output_chars] + "\n...(truncated)"

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ToolResult:
        code = parameters.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolResponse(text="Error: 'code' must be a non-empty string"), 0.0, {"ok": False}
        try:
            result = await asyncio.to_thread(
                run_python_sandboxed, code, timeout_s=self.timeout_s, memory_mb=self.memory_mb
            )
        except SandboxUnavailableError as e:
            return ToolResponse(text=f"Error: the code sandbox is unavailable: {e}"), 0.0, {"ok": False}
        metrics = {"ok": result.ok, "timed_out": result.timed_out, "duration_s": result.duration_s}
        if result.setup_failed:
            text = f"Error: {result.describe()}"
        elif result.timed_out:
            text = f"Error: the program ran past its time limit of {self.timeout_s:g} s"
        elif result.ok:
            text = result.stdout if result.stdout else "(no output)"
        else:
            text = f"{result.stdout}\nError (exit code {result.returncode}):\n{result.stderr}".strip()
        return ToolResponse(text=self._cut(text)), 0.0, metrics
