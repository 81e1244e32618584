"""Generate the synthetic arithmetic task in verl's parquet schema.

    python examples/data_preprocess/arithmetic.py --local_dir ~/data/arithmetic
    python examples/data_preprocess/arithmetic.py --local_dir verl/data/arithmetic   # regenerate the bundled data

Writes ``train.parquet`` and ``test.parquet`` with disjoint problems, data_source ``arithmetic``.
"""

from __future__ import annotations

import argparse
import os

from verl.data.arithmetic_task import (
    SUPPORTED_OPERATIONS,
    ArithmeticTaskConfig,
    generate_arithmetic_splits,
    write_parquet,
)


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, generate the splits and write them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", default="~/data/arithmetic", help="output directory")
    parser.add_argument("--train_size", type=int, default=2000)
    parser.add_argument("--test_size", type=int, default=256)
    parser.add_argument("--min_value", type=int, default=0)
    parser.add_argument("--max_value", type=int, default=50)
    parser.add_argument("--operations", default="+", help=f"comma-separated subset of {','.join(SUPPORTED_OPERATIONS)}")
    parser.add_argument("--allow_negative", action="store_true", help="allow a - b with a < b")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    task = ArithmeticTaskConfig(
        min_value=args.min_value,
        max_value=args.max_value,
        operations=tuple(op.strip() for op in args.operations.split(",") if op.strip()),
        non_negative=not args.allow_negative,
    )
    train, test = generate_arithmetic_splits(args.train_size, args.test_size, seed=args.seed, task=task)
    out = os.path.expanduser(args.local_dir)
    if train:
        write_parquet(train, os.path.join(out, "train.parquet"))
    if test:
        write_parquet(test, os.path.join(out, "test.parquet"))
    print(f"wrote {len(train)} train and {len(test)} test rows to {out}")


if __name__ == "__main__":
    main()
