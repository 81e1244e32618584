"""Command line: ``python -m verl.model_merger merge --backend fsdp --local_dir <ckpt>/global_step_N/actor
--target_dir <out> [--dtype bfloat16|float16|float32] [--merge_lora | --no-merge_lora] [--base_model <dir>]``, and
``python -m verl.model_merger test --backend fsdp --local_dir <ckpt>/global_step_N/actor --test_hf_dir <hf dir>``
(the merged weights equal the Hugging Face directory's: exit 0, else 1 with each differing tensor named).

Upstream verl's flags of the Megatron backend (``--tie-word-embedding``, ``--is-value-model``) and of uploading
(``--hf_upload_path``, ``--private``) are refused in one line; ``--use_cpu_initialization`` is what merging does
here (on the CPU) and is accepted."""

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
    merge.add_argument("--hf_upload_path", default=None, help=argparse.SUPPRESS)
    merge.add_argument("--private", action="store_true", help=argparse.SUPPRESS)
    test = sub.add_parser("test", help="check that a checkpoint's merged weights equal a Hugging Face directory's")
    test.add_argument("--backend", default="fsdp", help="checkpoint backend (only 'fsdp')")
    test.add_argument("--local_dir", required=True, help="global_step_N/actor (rank shards) or a HF dir")
    test.add_argument("--test_hf_dir", required=True, help="the reference Hugging Face directory")
    for op in (merge, test):  # upstream's flags: refused (Megatron's) or accepted as what runs here
        op.add_argument("--tie-word-embedding", action="store_true", help=argparse.SUPPRESS)
        op.add_argument("--is-value-model", action="store_true", help=argparse.SUPPRESS)
        op.add_argument("--use_cpu_initialization", action="store_true", help="accepted: merging runs on the CPU")
    return parser


def _refused_flag(args: argparse.Namespace) -> str | None:
    """The one-line refusal of an upstream flag this merger cannot honour, or None."""
    if args.tie_word_embedding or args.is_value_model:
        flag = "--tie-word-embedding" if args.tie_word_embedding else "--is-value-model"
        return (
            f"{flag} is read by upstream's Megatron backend only; a checkpoint here is FSDP's, whose config.json "
            "already says whether the embeddings are tied and which head the model has: drop it"
        )
    if getattr(args, "hf_upload_path", None) or getattr(args, "private", False):
        return (
            "--hf_upload_path / --private: uploading is not done by the merger here; merge, then run "
            "`hf upload <repo id> <target_dir>` (huggingface_hub's CLI)"
        )
    return None


def _test(args: argparse.Namespace) -> int:
    from verl.model_merger.compare import compare_with_hf_dir

    try:
        compared, problems = compare_with_hf_dir(args.local_dir, args.test_hf_dir)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if problems:
        shown = "\n".join(f"- {p}" for p in problems[:20])
        more = f"\n(and {len(problems) - 20} more)" if len(problems) > 20 else ""
        print(f"{args.local_dir} does not match {args.test_hf_dir}:\n{shown}{more}", file=sys.stderr)
        return 1
    print(f"{compared} tensors of {args.local_dir} match {args.test_hf_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = build_parser().parse_args(argv)
    if args.backend not in SUPPORTED_BACKENDS:
        print(f"error: --backend {args.backend!r} is not supported; use one of {SUPPORTED_BACKENDS}", file=sys.stderr)
        return 2
    refused = _refused_flag(args)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    if args.operation == "test":
        return _test(args)
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
