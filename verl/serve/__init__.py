"""An inference service for a trained model: ``python -m verl.serve MODEL_DIR`` (or ``verl serve MODEL_DIR``).

FastAPI + uvicorn; ``POST /generate``, OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``
(server-sent events with ``stream: true``), ``GET /health``, ``GET /metrics`` (Prometheus). Requests arriving
together are decoded together (dynamic batching on the project's rollout engine, or vLLM's engine). See
docs/serving.md.
"""

from verl.serve.app import ServeConfig, create_app

__all__ = ["ServeConfig", "create_app"]
