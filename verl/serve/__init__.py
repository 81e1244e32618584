"""An inference service for a trained model: ``python -m verl.serve MODEL_DIR`` (or ``verl serve MODEL_DIR``).

FastAPI + uvicorn; ``POST /generate``, OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``
(server-sent events with ``stream: true``), ``GET /health``, ``GET /metrics`` (Prometheus). Requests arriving
together are decoded together (dynamic batching on the project's rollout engine, or vLLM's engine). See
docs/serving.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServeConfig", "create_app", "require_serve_extra"]


def require_serve_extra() -> None:
    """Raise a ModuleNotFoundError naming the ``serve`` extra when FastAPI or uvicorn is not installed."""
    import importlib.util

    for name in ("fastapi", "uvicorn"):
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(
                f"verl serve needs {name}, from the 'serve' extra: pip install 'verl[serve]'", name=name
            )


def __getattr__(name: str) -> Any:
    # imported on first use, so `python -m verl.serve` can say which extra is missing instead of a traceback
    if name == "ServeConfig":
        from verl.serve.config import ServeConfig

        return ServeConfig
    if name == "create_app":
        require_serve_extra()
        from verl.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'verl.serve' has no attribute {name!r}")
