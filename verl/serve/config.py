"""The options of the inference service, importable without its web stack (FastAPI, uvicorn)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServeConfig:
    """Options of the service (the CLI flags of ``python -m verl.serve``).

    Attributes:
        model: Hugging Face dir, bundled model name, or LoRA adapter dir. lora: an adapter applied to ``model``.
        engine: ``auto`` | ``hf`` | ``vllm``. dtype: ``auto`` | ``float32`` | ``bfloat16`` | ``float16``.
        max_batch_size: most requests decoded together. batch_wait_ms: how long a batch is held open for more.
        no_batching: decode one request at a time (``max_batch_size=1``), to measure what batching buys.
        max_queue: most requests waiting; more get 503 with ``Retry-After``.
        request_timeout_s: time limit of a request (queueing included); past it the request is cancelled, 504.
        max_new_tokens: default and upper bound of the response length per request.
        max_model_len: context length (prompt + response) accepted; default the model's.
        served_model_name: the ``model`` name clients use; default the model directory's base name.
        allowed_local_media_path: a directory whose image files ``image_url`` parts may name (None: none).
        allow_remote_images: fetch ``http(s)`` image URLs (off: refused).
        tool_call_parser: how the model writes tool calls (``hermes`` | ``gpt-oss`` | ``kimi``), for chat requests
            with ``tools`` (:mod:`verl.experimental.agent_loop.openai_tool_calls`).
    """

    model: str
    lora: str | None = None
    engine: str = "auto"
    dtype: str = "auto"
    max_batch_size: int = 32
    batch_wait_ms: float = 10.0
    no_batching: bool = False
    max_queue: int = 256
    request_timeout_s: float = 120.0
    max_new_tokens: int = 256
    max_model_len: int | None = None
    served_model_name: str | None = None
    allowed_local_media_path: str | None = None
    allow_remote_images: bool = False
    tool_call_parser: str = "hermes"
