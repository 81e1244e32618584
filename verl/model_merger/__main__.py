"""Command line: ``python -m verl.model_merger merge --backend fsdp --local_dir <ckpt>/global_step_N/actor
--target_dir <out> [--dtype bfloat16|float16|float32] [--merge_lora | --no-merge_lora] [--base_model <dir>]``."""

from __future__ import annotations

import argparse
import sys

from verl.model_merger.base_model_merger import DTYPES, merge_checkpoint

SUPPORTED_BACKENDS = ("fsdp",)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m verl.model_merger``."""
    parser = argparse.ArgumentParser(
        prog="python -m verl.model_merger", description="Convert a verl checkpoint into a Hugging Face model dir."
    )
    sub = parser.add_subparsers(dest="operation", required=True)
    merge = sub.add_parser("merge", help="write a Hugging Face directory from a checkpoint")
    merge.add_argument("--backend", default="fsdp", help="checkpoint backend (only 'fsdp')")
    merge.add_argument("--local_dir", required=True, help="global_step_N/actor, a LoRA adapter dir or a HF dir")
    merge.add_argument("--target_dir", required=True, help="output Hugging Face directory (written atomically)")
    merge.add_argument("--dtype", default=None, choices=sorted(DTYPES), help="output dtype (default: as stored)")
    merge.add_argument(
        "--merge_lora",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="merge a LoRA adapter into the weights (default); --no-merge_lora copies it next to them",
    )
    merge.add_argument("--base_model", default=None, help="base model dir for a LoRA adapter")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = build_parser().parse_args(argv)
    if args.backend not in SUPPORTED_BACKENDS:
        print(f"error: --backend {args.backend!r} is not supported; use one of {SUPPORTED_BACKENDS}", file=sys.stderr)
        return 2
    from verl.models.hub import HubPathError

    try:
        out = merge_checkpoint(
            args.local_dir,
            args.target_dir,
            dtype=args.dtype,
            merge_lora=args.merge_lora,
            base_model_path=args.base_model,
        )
    except HubPathError as e:  # a base model id that is not cached and cannot be downloaded: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"saved Hugging Face model to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
