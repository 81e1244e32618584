"""Preprocess Geometry3K (``hiyouga/geometry3k``) into verl's parquet schema with images, as upstream verl's script.

    python examples/data_preprocess/geo3k.py --local_save_dir ~/data/geo3k        # hiyouga/geometry3k from the hub
    python examples/data_preprocess/geo3k.py --local_dataset_path ~/geo3k_raw --local_save_dir ~/data/geo3k

Without a local path the raw data comes from ``datasets.load_dataset("hiyouga/geometry3k")`` (cached under
``HF_HOME``; needs ``pip install datasets``). ``--local_dataset_path`` is a directory holding ``train`` and ``test``
files (``.parquet``/``.jsonl``, e.g. the ``data/train-*.parquet`` of ``hf download hiyouga/geometry3k --repo-type
dataset``). Raw columns: ``problem`` (text with an ``<image>`` placeholder), ``answer``, ``images`` (a list).

Output rows: data_source ``hiyouga/geometry3k`` (scored by :mod:`verl.rewards.geo3k`), the problem plus
the instruction below as the user message (its ``<image>`` placeholders kept: ``RLHFDataset`` turns them into the
chat template's image parts), ``images`` as ``{"bytes": <png>}`` dicts, the answer as ground truth. Train with
``examples/grpo_trainer/run_qwen2_5_vl-7b.sh``; see docs/vision_language.md.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from typing import Any

DATA_SOURCE = "hiyouga/geometry3k"
INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST BE put in \\boxed{}."
)


def storable_image(image: Any, where: str) -> dict[str, Any]:
    """One raw image (a PIL image, bytes, or a ``{"bytes", "path"}`` dict, as parquet stores it) -> ``{"bytes"}``."""
    if isinstance(image, dict) and image.get("bytes") is not None:
        return {"bytes": bytes(image["bytes"])}
    if isinstance(image, (bytes, bytearray)):
        return {"bytes": bytes(image)}
    if hasattr(image, "save"):  # PIL
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        return {"bytes": buf.getvalue()}
    raise ValueError(f"{where}: an image must be a PIL image, bytes or a dict with 'bytes', got {type(image).__name__}")


def convert_records(records: list[dict[str, Any]], split: str, source: str = "<records>") -> list[dict[str, Any]]:
    """Geometry3K ``problem``/``answer``/``images`` records -> rows in verl's schema (errors name source and row)."""
    if not records:
        raise ValueError(f"Geometry3K data {source} has no rows")
    rows = []
    for i, rec in enumerate(records):
        where = f"{source} row {i}"
        problem, answer, images = rec.get("problem"), rec.get("answer"), rec.get("images")
        if not isinstance(problem, str) or not isinstance(answer, str) or not isinstance(images, list):
            raise ValueError(f"{where}: expected string 'problem' and 'answer' and a list 'images'")
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": problem + " " + INSTRUCTION}],
                "images": [storable_image(img, f"{where} image {k}") for k, img in enumerate(images)],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {"split": split, "index": i, "answer": answer, "question": problem},
            }
        )
    return rows


def build_parser() -> argparse.ArgumentParser:
    """Upstream verl's options (``--local_dataset_path``, ``--local_save_dir``/``--local_dir``) plus explicit files."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dataset_path", default=None, help="directory with the raw train/test files")
    parser.add_argument("--train_file", default=None, help="a raw train file (.parquet or .jsonl)")
    parser.add_argument("--test_file", default=None, help="a raw test file (.parquet or .jsonl)")
    parser.add_argument(
        "--local_save_dir", "--local_dir", dest="local_save_dir", default="~/data/geo3k", help="output directory"
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
            local_path=args.local_dataset_path,
            split_files={"train": args.train_file, "test": args.test_file},
        )
        rows = {split: convert_records(recs, split, src) for split, (src, recs) in raw.items()}
        written = save_splits(rows, os.path.expanduser(args.local_save_dir))
    except (HubPathError, ValueError) as e:
        print(f"geo3k.py: error: {e}", file=sys.stderr)
        return 2
    for split, path in written.items():
        print(f"{split}: {len(rows[split])} rows from {raw[split][0]} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
