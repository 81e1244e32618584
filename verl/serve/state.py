"""What the routes of the inference service share once the app has started: :class:`ServeState`.

The tokenizer, the engine with its request server (whose thread runs every batch), the
:class:`~verl.serve.batching.Batcher` in front of it and the metrics; and the request helpers every endpoint uses:
the model-name check, prompt encoding (plain or through the chat template), a :class:`~verl.serve.batching.Job`
checked against the context length, queueing all jobs of a request or none, and the per-request metrics.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.experimental.agent_loop.openai_schemas import ChatCompletionRequest, ServeError
from verl.serve.batching import Batcher, Completion, Job
from verl.serve.config import ServeConfig
from verl.serve.engine import ModelSource
from verl.serve.metrics import ServeMetrics

__all__ = ["ServeState"]


class ServeState:
    """What the routes share once the app has started (built by :meth:`start`)."""

    config: ServeConfig
    metrics: ServeMetrics
    source: ModelSource
    tokenizer: Any
    processor: Any
    engine: Any
    executor: ThreadPoolExecutor
    batcher: Batcher
    max_context: int
    model_names: set[str]

    @classmethod
    async def start(cls, config: ServeConfig) -> ServeState:
        """Load the tokenizer and start the engine and its request server (built on a one-thread executor, where
        the engine is also closed; batches run on the request server's thread), and the batcher."""
        from verl.models.loader import load_tokenizer
        from verl.serve.engine import ServerOptions, build_engine, resolve_model_source

        self = cls()
        self.config = config
        self.metrics = ServeMetrics()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verl-serve-engine")
        loop = asyncio.get_running_loop()
        metrics = self.metrics
        options = ServerOptions(
            max_batch_size=1 if config.no_batching else config.max_batch_size,
            batch_wait_s=0.0 if config.no_batching else config.batch_wait_ms / 1000.0,
            on_start=lambda request: metrics.queue_wait.observe(request.started_at - request.enqueued_at),
            on_batch=metrics.batch_size.observe,
        )
        try:
            self.source = await loop.run_in_executor(
                self.executor, resolve_model_source, config.model, config.lora, config.served_model_name
            )
            try:
                self.tokenizer = load_tokenizer(self.source.path)
                from verl.models.vlm import processor_for_model

                # a vision-language model's processor (image_url content parts), None for text models
                self.processor = processor_for_model(self.source.path, self.tokenizer)
                self.engine = await loop.run_in_executor(
                    self.executor, build_engine, self.source, self.tokenizer, config.engine, config.dtype,
                    config.max_model_len, options,
                )  # fmt: skip
            except BaseException:
                self.source.close()
                raise
        except BaseException:
            self.executor.shutdown(wait=True)
            raise
        self.engine_name = self.engine.name
        self.max_context = min(config.max_model_len or self.engine.max_context, self.engine.max_context)
        self.model_names = {self.source.name, config.model}
        self.batcher = Batcher(self.engine.server, max_queue=config.max_queue)
        metrics.queue_depth.set_function(lambda: float(self.batcher.queue_depth))
        metrics.running.set_function(lambda: float(self.batcher.running))
        return self

    async def close(self) -> None:
        """Stop the batcher and its request server (after the engine step in flight), then close the engine on the
        thread that built it and free the rest."""
        await self.batcher.close()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, self.engine.close)
        finally:
            await loop.run_in_executor(None, self.executor.shutdown, True)
            self.source.close()

    # ----------------------------------------------------------------------------------------- requests
    def check_model(self, model: str | None) -> None:
        if model is not None and model not in self.model_names:
            raise ServeError(
                404, f"model: {model!r} is not served here; available: {self.source.name!r}", "model",
                "model_not_found",
            )  # fmt: skip

    def make_job(
        self,
        prompt_ids: list[int],
        field: str,
        max_new_tokens: int | None,
        max_tokens_field: str,
        temperature: float | None,
        top_p: float | None,
        stop: tuple[str, ...],
        stream: bool,
    ) -> Job:
        """A job for one prompt, checked against the context length; ``field`` names the prompt in errors."""
        n_prompt = len(prompt_ids)
        if n_prompt == 0:
            raise ServeError(400, f"{field}: must not be empty", field, "empty_prompt")
        room = self.max_context - n_prompt
        if room < 1:
            raise ServeError(
                400, f"{field}: {n_prompt} tokens leave no room to generate in the context of {self.max_context}",
                field, "context_length_exceeded",
            )  # fmt: skip
        if max_new_tokens is not None and max_new_tokens > self.config.max_new_tokens:
            raise ServeError(
                400, f"{max_tokens_field}: {max_new_tokens} exceeds this server's limit of "
                f"{self.config.max_new_tokens}", max_tokens_field, "max_tokens_exceeded",
            )  # fmt: skip
        if max_new_tokens is not None and max_new_tokens > room:
            raise ServeError(
                400, f"{max_tokens_field}: {n_prompt} prompt tokens + {max_new_tokens} new tokens exceed the model's "
                f"context of {self.max_context} tokens", max_tokens_field, "context_length_exceeded",
            )  # fmt: skip
        return Job(
            prompt_ids=prompt_ids,
            max_new_tokens=min(max_new_tokens or self.config.max_new_tokens, room),
            temperature=1.0 if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p),
            decode=self.decode,
            stop=stop,
            stream=stream,
            timeout_s=self.config.request_timeout_s,
        )

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])

    def chat_prompt(self, request: ChatCompletionRequest) -> tuple[list[int], dict[str, Any] | None]:
        """The prompt ids of a chat request and, when its messages have images, their ``multi_modal_inputs``."""
        from verl.serve.images import has_images, vision_chat_inputs

        if has_images(request.messages):
            if self.engine_name != "hf":
                raise ServeError(400, "messages: images are served by the hf engine only (--engine hf)", "messages")
            cfg = self.config
            return vision_chat_inputs(
                self.processor, request.messages, cfg.allowed_local_media_path, cfg.allow_remote_images
            )
        if not getattr(self.tokenizer, "chat_template", None):
            raise ServeError(400, "messages: the model has no chat template; use /v1/completions", "messages")
        messages = [{"role": m.role, "content": m.text()} for m in request.messages]
        try:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as err:  # a template may reject a role order (e.g. two system messages)
            raise ServeError(400, f"messages: the chat template rejected them: {err}", "messages") from err
        # the template writes the special tokens (BOS) itself
        return self.encode(text, add_special_tokens=False), None

    def submit(self, jobs: list[Job]) -> None:
        """Queue all jobs of one request, or none (a full queue cancels the ones already queued)."""
        for i, job in enumerate(jobs):
            try:
                self.batcher.submit(job)
            except ServeError:
                for queued in jobs[:i]:
                    queued.cancel("disconnected")
                raise

    def record(self, endpoint: str, started: float, results: list[Completion]) -> None:
        self.metrics.latency.labels(endpoint).observe(time.monotonic() - started)
        self.metrics.prompt_tokens.inc(sum(r.prompt_tokens for r in results))
        self.metrics.generated_tokens.inc(sum(r.completion_tokens for r in results))
