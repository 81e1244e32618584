"""Convert a LOCAL copy of GSM8K to verl's parquet schema (nothing is downloaded).

    python examples/data_preprocess/gsm8k.py --input_dir ~/gsm8k_raw --local_dir ~/data/gsm8k

``--input_dir`` holds ``train`` and ``test`` files as ``.parquet`` or ``.jsonl`` (e.g. ``train.jsonl`` from the
GSM8K repository, or ``main/train-00000-of-00001.parquet`` from a Hugging Face snapshot), with columns
``question`` and ``answer``; ``--train_file`` / ``--test_file`` name the files directly instead.
Output rows: data_source ``openai/gsm8k``, the question plus the instruction below as the user message, and the
number after ``####`` in the reference answer as ground truth.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
from typing import Any

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_ANSWER_RE = re.compile(r"####\s*(-?[0-9.,$]+)")


def extract_ground_truth(answer: str, where: str) -> str:
    """The number after ``####`` in a GSM8K reference solution, commas removed; ValueError naming ``where``."""
    match = _ANSWER_RE.search(answer or "")
    if match is None:
        raise ValueError(f"{where}: reference answer has no '#### <number>': {answer!r:.200}")
    return match.group(1).replace(",", "").replace("$", "").rstrip(".")


def read_records(path: str) -> list[dict[str, Any]]:
    """Read ``question``/``answer`` records from a .parquet or .jsonl file (errors name the file and line)."""
    if not os.path.isfile(path):
        raise ValueError(f"GSM8K file {path} does not exist")
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        records = pq.read_table(path).to_pylist()
    elif path.endswith((".jsonl", ".json")):
        records = []
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} line {line_no}: invalid JSON: {e}") from e
    else:
        raise ValueError(f"GSM8K file {path}: expected .parquet or .jsonl")
    for i, rec in enumerate(records):
        for col in ("question", "answer"):
            if not isinstance(rec.get(col), str):
                raise ValueError(f"{path} row {i}: column {col!r} must be a string, got {rec.get(col)!r:.100}")
    if not records:
        raise ValueError(f"GSM8K file {path} has no rows")
    return records


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


def find_split_file(input_dir: str, split: str) -> str:
    """The single ``.parquet``/``.jsonl`` file under ``input_dir`` whose name starts with ``split``."""
    candidates = sorted(
        p
        for pattern in (f"{split}*.parquet", f"{split}*.jsonl", f"*/{split}*.parquet", f"*/{split}*.jsonl")
        for p in glob.glob(os.path.join(input_dir, pattern))
    )
    if len(candidates) != 1:
        raise ValueError(f"expected one {split} file (.parquet or .jsonl) under {input_dir}, found {candidates}")
    return candidates[0]


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, convert the train and test splits and write them as parquet."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input_dir", default=None, help="directory with the raw train/test files")
    parser.add_argument("--train_file", default=None)
    parser.add_argument("--test_file", default=None)
    parser.add_argument("--local_dir", default="~/data/gsm8k", help="output directory")
    args = parser.parse_args(argv)

    from verl.utils.dataset.arithmetic import write_parquet

    out = os.path.expanduser(args.local_dir)
    for split, explicit in (("train", args.train_file), ("test", args.test_file)):
        if explicit:
            path = os.path.expanduser(explicit)
        elif args.input_dir:
            path = find_split_file(os.path.expanduser(args.input_dir), split)
        else:
            parser.error("give --input_dir or --train_file/--test_file (a local GSM8K copy; nothing is downloaded)")
        rows = convert_records(read_records(path), split, path)
        write_parquet(rows, os.path.join(out, f"{split}.parquet"))
        print(f"{split}: {len(rows)} rows from {path} -> {os.path.join(out, split + '.parquet')}")


if __name__ == "__main__":
    main()
