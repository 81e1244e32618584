"""Preprocess GSM8K into verl's parquet schema: from the Hugging Face hub, or from a local copy.

    python examples/data_preprocess/gsm8k.py --local_save_dir ~/data/gsm8k          # openai/gsm8k from the hub
    python examples/data_preprocess/gsm8k.py --local_dataset_path ~/gsm8k_raw --local_save_dir ~/data/gsm8k

Without a local path the raw data comes from ``datasets.load_dataset("openai/gsm8k", "main")`` (as upstream verl's
script does; cached under ``HF_HOME``, ``HF_DATASETS_OFFLINE=1`` keeps it offline; needs ``pip install datasets``).
``--local_dataset_path`` is a directory holding ``train`` and ``test`` files as ``.parquet`` or ``.jsonl`` (e.g.
``train.jsonl`` from the GSM8K GitHub repository, or the ``main/train-00000-of-00001.parquet`` of
``hf download openai/gsm8k --repo-type dataset --local-dir DIR``); ``--train_file`` / ``--test_file`` name the files
directly. Columns ``question`` and ``answer``.

Output rows: data_source ``openai/gsm8k``, the question plus the instruction below as the user message, and the
number after ``####`` in the reference answer as ground truth. A data set that cannot be had: one line, exit code 2.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

DATA_SOURCE = "openai/gsm8k"
HUB_CONFIG = "main"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_ANSWER_RE = re.compile(r"####\s*(-?[0-9.,$]+)")


def extract_ground_truth(answer: str, where: str) -> str:
    """The number after ``####`` in a GSM8K reference solution, commas removed; ValueError naming ``where``."""
    match = _ANSWER_RE.search(answer or "")
    if match is None:
        raise ValueError(f"{where}: reference answer has no '#### <number>': {answer!r:.200}")
    return match.group(1).replace(",", "").replace("$", "").rstrip(".")


def check_records(records: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """Require string ``question``/``answer`` columns and at least one row (errors name the source and row)."""
    if not records:
        raise ValueError(f"GSM8K data {source} has no rows")
    for i, rec in enumerate(records):
        for col in ("question", "answer"):
            if not isinstance(rec.get(col), str):
                raise ValueError(f"{source} row {i}: column {col!r} must be a string, got {rec.get(col)!r:.100}")
    return records


def read_records(path: str) -> list[dict[str, Any]]:
    """Read ``question``/``answer`` records from a local .parquet or .jsonl file (errors name the file and line)."""
    from verl.data.raw_splits import read_local_records

    return check_records(read_local_records(path), path)


def convert_records(records: list[dict[str, Any]], split: str, source_path: str = "<records>") -> list[dict[str, Any]]:
    """GSM8K ``question``/``answer`` records -> rows in verl's schema."""
    rows = []
    for i, rec in enumerate(records):
        question = rec["question"]
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
                "ability": "math",
                "reward_model": {
                    "style": "rule",
                    "ground_truth": extract_ground_truth(rec["answer"], f"{source_path} row {i}"),
                },
                "extra_info": {"split": split, "index": i, "question": question, "answer": rec["answer"]},
            }
        )
    return rows


def build_parser() -> argparse.ArgumentParser:
    """Upstream verl's options (``--local_dataset_path``, ``--local_save_dir``, ``--local_dir``) plus explicit files."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--local_dataset_path",
        "--input_dir",
        dest="local_dataset_path",
        default=None,
        help="directory with the raw train/test files (default: load openai/gsm8k from the hub)",
    )
    parser.add_argument("--train_file", default=None, help="a raw train file (.parquet or .jsonl)")
    parser.add_argument("--test_file", default=None, help="a raw test file (.parquet or .jsonl)")
    parser.add_argument(
        "--local_save_dir", "--local_dir", dest="local_save_dir", default="~/data/gsm8k", help="output directory"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Load the raw splits, convert them and write ``train.parquet`` / ``test.parquet``; returns the exit code."""
    args = build_parser().parse_args(argv)
    from verl.data.raw_splits import load_raw_splits, save_splits
    from verl.models.hub import HubPathError

    try:
        raw = load_raw_splits(
            DATA_SOURCE,
            ["train", "test"],
            config_name=HUB_CONFIG,
            local_path=args.local_dataset_path,
            split_files={"train": args.train_file, "test": args.test_file},
        )
        rows = {split: convert_records(check_records(recs, src), split, src) for split, (src, recs) in raw.items()}
        written = save_splits(rows, os.path.expanduser(args.local_save_dir))
    except (HubPathError, ValueError) as e:
        print(f"gsm8k.py: error: {e}", file=sys.stderr)
        return 2
    for split, path in written.items():
        print(f"{split}: {len(rows[split])} rows from {raw[split][0]} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
