"""``python -m verl.serve MODEL_DIR [options]``: start the inference service with uvicorn (see docs/serving.md)."""

from __future__ import annotations

import argparse
import logging
import sys

from verl.serve import require_serve_extra
from verl.serve.config import ServeConfig
from verl.serve.engine import ENGINES


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m verl.serve`` / ``verl serve``."""
    d = ServeConfig(model="")
    p = argparse.ArgumentParser(
        prog="verl serve", description="Serve a Hugging Face model directory over HTTP (FastAPI + uvicorn)."
    )
    p.add_argument("model", metavar="MODEL_DIR", help="Hugging Face dir (e.g. a run's hf_model/), hub id "
                   "(org/name[@rev]), bundled model name (smollm2-135m-instruct) or PEFT LoRA adapter dir")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--lora", metavar="ADAPTER_DIR", default=None, help="LoRA adapter applied to MODEL_DIR")
    p.add_argument("--engine", choices=ENGINES, default=d.engine, help="auto: vLLM when usable, else hf")
    p.add_argument("--dtype", default=d.dtype, choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--max-batch-size", type=int, default=d.max_batch_size, help="most requests decoded together")
    p.add_argument("--batch-wait-ms", type=float, default=d.batch_wait_ms, help="how long a batch waits for more")
    p.add_argument("--no-batching", action="store_true", help="decode one request at a time")
    p.add_argument("--max-queue", type=int, default=d.max_queue, help="waiting requests before 503 + Retry-After")
    p.add_argument("--request-timeout-s", type=float, default=d.request_timeout_s, help="per-request time limit")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="default and cap of new tokens")
    p.add_argument("--max-model-len", type=int, default=None, help="context length accepted (default: model's)")
    p.add_argument("--served-model-name", default=None, help="the `model` name clients send")
    p.add_argument("--allowed-local-media-path", default=None, help="directory whose image files requests may name")
    p.add_argument("--allow-remote-images", action="store_true", help="fetch http(s) image URLs (default: refused)")
    p.add_argument(
        "--tool-call-parser",
        default=d.tool_call_parser,
        choices=["hermes", "gpt-oss", "kimi"],
        help="how the model writes tool calls (chat requests with tools)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's, one per core)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and serve until interrupted (SIGINT/SIGTERM shut down cleanly); returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        require_serve_extra()
    except ModuleNotFoundError as e:
        print(str(e), file=sys.stderr)
        return 2
    import uvicorn

    from verl.serve.app import create_app

    for name, value in (("--max-batch-size", args.max_batch_size), ("--max-queue", args.max_queue),
                        ("--max-new-tokens", args.max_new_tokens)):  # fmt: skip
        if value < 1:
            print(f"verl serve: {name} must be >= 1, got {value}", file=sys.stderr)
            return 2
    if args.request_timeout_s <= 0 or args.batch_wait_ms < 0:
        print("verl serve: --request-timeout-s must be > 0 and --batch-wait-ms >= 0", file=sys.stderr)
        return 2
    if args.threads is not None:
        if args.threads < 1:
            print(f"verl serve: --threads must be >= 1, got {args.threads}", file=sys.stderr)
            return 2
        import torch

        torch.set_num_threads(args.threads)
    from verl.models.hub import HubPathError
    from verl.trainer.run_paths import prefetch_model

    try:  # a hub id is fetched now, so a bad one is one line here, not a traceback from the server's startup
        prefetch_model(args.model)
    except HubPathError as e:
        print(f"verl serve: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ServeConfig(
        model=args.model,
        lora=args.lora,
        engine=args.engine,
        dtype=args.dtype,
        max_batch_size=args.max_batch_size,
        batch_wait_ms=args.batch_wait_ms,
        no_batching=args.no_batching,
        max_queue=args.max_queue,
        request_timeout_s=args.request_timeout_s,
        max_new_tokens=args.max_new_tokens,
        max_model_len=args.max_model_len,
        served_model_name=args.served_model_name,
        allowed_local_media_path=args.allowed_local_media_path,
        allow_remote_images=args.allow_remote_images,
        tool_call_parser=args.tool_call_parser,
    )
    uvicorn.run(
        create_app(config), host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=10
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
