"""Shared set-up of the API examples: ``--tiny`` (random tiny Llama + byte tokenizer, seconds on a CPU) or the
bundled SmolLM2-135M-Instruct (the documents name hub models that cannot be downloaded here)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

import torch

BUNDLED = "smollm2-135m-instruct"


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model and a byte tokenizer (seconds)")
    parser.add_argument("--output-dir", default=None, help="where files go (default: a temporary directory)")
    args = parser.parse_args()
    if args.output_dir is None:
        args.output_dir = tempfile.mkdtemp(prefix="verl_api_example_")
    os.makedirs(args.output_dir, exist_ok=True)
    torch.set_num_threads(int(os.environ.get("VERL_EXAMPLE_THREADS", "1")))
    return args


def model_path(tiny: bool, output_dir: str) -> str:
    """A local model directory: a freshly written tiny model, or the bundled model."""
    if tiny:
        from verl.models.tiny import make_tiny_model_dir

        target = os.path.join(output_dir, "tiny_model")
        if not os.path.isdir(target):
            make_tiny_model_dir(target)
        return target
    from verl.models.loader import resolve_model_path

    return resolve_model_path(BUNDLED)


def fast_config(tiny: bool) -> dict[str, Any]:
    """Small generation budgets so the examples finish quickly (fp32 on the tiny model)."""
    cfg: dict[str, Any] = {"max_new_tokens": 8 if tiny else 32, "max_prompt_length": 256}
    if tiny:
        cfg.update({"actor_rollout_ref.actor.dtype": "float32", "actor_rollout_ref.rollout.dtype": "float32"})
        cfg["critic.dtype"] = "float32"
    return cfg


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def done(message: str) -> None:
    print(message)
    sys.stdout.flush()
