"""Preprocess MATH (``DigitalLearningGmbH/MATH-lighteval``) into verl's parquet schema: from the hub or a local copy.

    python examples/data_preprocess/math_dataset.py --local_save_dir ~/data/math
    python examples/data_preprocess/math_dataset.py --local_dataset_path ~/math_raw --local_save_dir ~/data/math

Without a local path the raw data comes from ``datasets.load_dataset("DigitalLearningGmbH/MATH-lighteval")``, the
copy upstream verl's script uses since ``lighteval/MATH`` left the hub (cached under ``HF_HOME``;
``HF_DATASETS_OFFLINE=1`` keeps it offline; needs ``pip install datasets``). ``--local_dataset_path`` is a directory
with ``train`` and ``test`` files as ``.parquet`` or ``.jsonl`` (e.g. ``hf download DigitalLearningGmbH/MATH-lighteval
--repo-type dataset --local-dir DIR``); columns ``problem`` and ``solution`` (``level`` and ``type`` are kept in
``extra_info`` when present).

Output rows: data_source ``DigitalLearningGmbH/MATH-lighteval`` (scored by verl's MATH scorer), the problem plus the
instruction below as the user message, and the content of the solution's last ``\\boxed{}`` as ground truth.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def convert_records(records: list[dict[str, Any]], split: str, source: str = "<records>") -> list[dict[str, Any]]:
    """MATH ``problem``/``solution`` records -> rows in verl's schema (ValueError naming the row on bad input)."""
    from verl.rewards.math import last_boxed_content

    if not records:
        raise ValueError(f"MATH data {source} has no rows")
    rows = []
    for i, rec in enumerate(records):
        for col in ("problem", "solution"):
            if not isinstance(rec.get(col), str):
                raise ValueError(f"{source} row {i}: column {col!r} must be a string, got {rec.get(col)!r:.100}")
        answer = last_boxed_content(rec["solution"])
        if answer is None:
            raise ValueError(f"{source} row {i}: solution has no \\boxed{{...}} answer: {rec['solution']!r:.200}")
        extra = {"split": split, "index": i}
        extra.update({k: rec[k] for k in ("level", "type") if isinstance(rec.get(k), str)})
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": rec["problem"] + " " + INSTRUCTION}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": extra,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Load the raw splits, convert them and write ``train.parquet`` / ``test.parquet``; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--local_dataset_path", default=None, help="directory with the raw train/test files (default: the hub)"
    )
    parser.add_argument("--train_file", default=None, help="a raw train file (.parquet or .jsonl)")
    parser.add_argument("--test_file", default=None, help="a raw test file (.parquet or .jsonl)")
    parser.add_argument(
        "--local_save_dir", "--local_dir", dest="local_save_dir", default="~/data/math", help="output directory"
    )
    args = parser.parse_args(argv)
    from verl.data.raw_splits import load_raw_splits, save_splits
    from verl.models.hub import HubPathError

    try:
        raw = load_raw_splits(
            DATA_SOURCE,
            ["train", "test"],
            local_path=args.local_dataset_path,
            split_files={"train": args.train_file, "test": args.test_file},
        )
        rows = {split: convert_records(recs, split, src) for split, (src, recs) in raw.items()}
        written = save_splits(rows, os.path.expanduser(args.local_save_dir))
    except (HubPathError, ValueError) as e:
        print(f"math_dataset.py: error: {e}", file=sys.stderr)
        return 2
    for split, path in written.items():
        print(f"{split}: {len(rows[split])} rows from {raw[split][0]} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
