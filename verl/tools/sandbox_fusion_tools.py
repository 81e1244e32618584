"""A code interpreter tool that runs the model's code on a Sandbox Fusion server (verl's ``SandboxFusionTool``).

Sandbox Fusion (ByteDance's code sandbox, github.com/bytedance/SandboxFusion) answers ``POST /run_code`` with
``{"code", "language", "compile_timeout", "run_timeout", "memory_limit_MB", "stdin"}`` and returns
``{"status": "Success" | "Failed" | "SandboxError", "message", "compile_result", "run_result": {"status":
"Finished" | "TimeLimitExceeded" | "Error", "return_code", "stdout", "stderr", "execution_time"}}``. The tool
posts one request per call from a worker thread (the event loop keeps running other trajectories) through the
project's Sandbox Fusion client (:func:`verl.rewards.sandbox_fusion.call_sandbox_api`, which the code
rewards use too: it retries gateway time-outs) and shows the model the run's standard output, and its standard
error when there is any.

Config keys (verl's names)::

    - class_name: verl.tools.sandbox_fusion_tools.SandboxFusionTool
      config:
        type: native
        sandbox_fusion_url: http://127.0.0.1:8080/run_code   # the full run_code endpoint (required)
        default_timeout: 30         # run_timeout in seconds; a call's own "timeout" argument may only lower it
        default_language: python
        memory_limit_mb: 1024
        num_workers: 10             # requests this tool has in flight at once
        rate_limit: 10              # requests in flight to this URL over all tools of the process ...
        enable_global_rate_limit: true   # ... when true (else only num_workers applies)

Without a Sandbox Fusion deployment, ``python -m verl.tools.utils.sandbox_fusion_server`` serves the same API on
the local machine through the project's sandbox (Python only).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Optional

from verl.base_config import omega_conf_to_dataclass
from verl.rewards import sandbox_fusion
from verl.tools.base_tool import BaseTool, ToolConfig, ToolResult
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["SandboxFusionTool"]

CONFIG_KEYS = (
    "type",
    "sandbox_fusion_url",
    "default_timeout",
    "default_language",
    "memory_limit_mb",
    "num_workers",
    "rate_limit",
    "enable_global_rate_limit",
)
_URL_LIMITS: dict[tuple[str, int], threading.BoundedSemaphore] = {}
_URL_LIMITS_LOCK = threading.Lock()


def _url_limit(url: str, limit: int) -> threading.BoundedSemaphore:
    with _URL_LIMITS_LOCK:
        return _URL_LIMITS.setdefault((url, limit), threading.BoundedSemaphore(limit))


@dataclass
class SandboxFusionToolConfig(ToolConfig):
    """``config`` of a Sandbox Fusion tool entry (the one home of its defaults; see the module docstring)."""

    sandbox_fusion_url: Optional[str] = None  # required: the server's run_code endpoint
    default_timeout: float = 30  # seconds a run may take
    default_language: str = "python"
    memory_limit_mb: int = 1024
    num_workers: int = 10  # runs in flight from this tool
    rate_limit: int = 10  # runs in flight to one server URL, over every tool of the process
    enable_global_rate_limit: bool = True


class SandboxFusionTool(BaseTool):
    """``code_interpreter(code)`` on a Sandbox Fusion server; see the module docstring for the config keys.

    Metrics of a call: ``ok`` (the run finished with exit code 0), ``status``, ``run_status``, ``duration_s``
    (the sandbox's execution time).
    """

    def __init__(self, config: dict[str, Any] | None, tool_schema: OpenAIFunctionToolSchema | None) -> None:
        super().__init__(config, tool_schema)
        unknown = sorted(set(self.config) - set(CONFIG_KEYS))
        if unknown:
            raise ValueError(f"SandboxFusionTool: unknown config keys {unknown}; known: {list(CONFIG_KEYS)}")
        cfg = omega_conf_to_dataclass(self.config, SandboxFusionToolConfig)
        self.sandbox_fusion_url = str(cfg.sandbox_fusion_url or "")
        if not self.sandbox_fusion_url.startswith(("http://", "https://")):
            raise ValueError(
                f"SandboxFusionTool: config.sandbox_fusion_url={self.sandbox_fusion_url!r} must be the http(s) URL "
                "of the server's run_code endpoint, e.g. http://127.0.0.1:8080/run_code"
            )
        self.default_timeout = float(cfg.default_timeout)
        self.default_language = str(cfg.default_language)
        self.memory_limit_mb = int(cfg.memory_limit_mb)
        self.num_workers = int(cfg.num_workers)
        self.rate_limit = int(cfg.rate_limit)
        self.enable_global_rate_limit = bool(cfg.enable_global_rate_limit)
        for key in ("default_timeout", "memory_limit_mb", "num_workers", "rate_limit"):
            if getattr(self, key) <= 0:
                raise ValueError(f"SandboxFusionTool: config.{key}={getattr(self, key)} must be > 0")
        self._own_limit = threading.BoundedSemaphore(self.num_workers)
        self._url_limit = (
            _url_limit(self.sandbox_fusion_url, self.rate_limit) if self.enable_global_rate_limit else None
        )

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "code_interpreter",
                    "description": "Run a program and return what it prints.",
                    "parameters": {
                        "type": "object",
                        "properties": {"code": {"type": "string", "description": "the source code to run"}},
                        "required": ["code"],
                    },
                },
            }
        )

    def _post(self, code: str, language: str, timeout: float) -> tuple[dict[str, Any] | None, str | None]:
        """One request, within this tool's and (if enabled) the URL's limit of requests in flight:
        ``(answer, None)`` or ``(None, error)``."""
        args = (self.sandbox_fusion_url, code, "", timeout, timeout, self.memory_limit_mb, language)
        with self._own_limit:
            if self._url_limit is None:
                return sandbox_fusion.call_sandbox_api(*args)
            with self._url_limit:
                return sandbox_fusion.call_sandbox_api(*args)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ToolResult:
        code = parameters.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolResponse(text="Error: 'code' must be a non-empty string"), 0.0, {"ok": False}
        timeout = self.default_timeout
        if isinstance(parameters.get("timeout"), (int, float)) and parameters["timeout"] > 0:
            timeout = min(timeout, float(parameters["timeout"]))
        language = str(parameters.get("language") or self.default_language)
        answer, error = await asyncio.to_thread(self._post, code, language, timeout)
        if answer is None or not isinstance(answer, dict):
            text = f"Error: the Sandbox Fusion server failed: {error or f'answered {answer!r:.200}'}"
            return ToolResponse(text=text), 0.0, {"ok": False, "status": "RequestError"}
        return self._response(answer, timeout)

    @staticmethod
    def _response(answer: dict[str, Any], timeout: float) -> ToolResult:
        status = str(answer.get("status", ""))
        run = answer.get("run_result") or {}
        compiled = answer.get("compile_result") or {}
        metrics = {
            "status": status,
            "run_status": run.get("status"),
            "ok": status == "Success" and run.get("return_code") == 0,
            "duration_s": float(run.get("execution_time") or 0.0),
        }
        if status == "SandboxError":
            return ToolResponse(text=f"Error: the sandbox failed: {answer.get('message', '')}"), 0.0, metrics
        if compiled.get("status") not in (None, "Finished") or (compiled.get("return_code") or 0) != 0:
            text = f"Error: compilation failed:\n{compiled.get('stderr') or compiled.get('stdout') or ''}".strip()
            return ToolResponse(text=text), 0.0, metrics
        if run.get("status") == "TimeLimitExceeded":
            text = f"{(run.get('stdout') or '').rstrip()}\nError: the program ran past its time limit of {timeout:g} s"
            return ToolResponse(text=text.strip()), 0.0, metrics
        stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
        if metrics["ok"]:
            text = stdout + (f"\n{stderr}" if stderr else "") if (stdout or stderr) else "(no output)"
        else:
            text = f"{stdout.rstrip()}\nError (exit code {run.get('return_code')}):\n{stderr}".strip()
        return ToolResponse(text=text), 0.0, metrics
