"""Synthetic arithmetic task: ``a <op> b`` questions in verl's parquet schema (the bundled default dataset).

The prompt asks for just the number, so a small instruct model (e.g. SmolLM2-135M-Instruct) answers in a few
tokens and the rule scorer ``verl.rewards.arithmetic`` can grade it by the last integer it wrote.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

DATA_SOURCE = "arithmetic"
SUPPORTED_OPERATIONS = ("+", "-", "*")
PROMPT_TEMPLATE = "What is {a} {op} {b}? Answer with just the number."


@dataclass
class ArithmeticTaskConfig:
    """Which problems exist: operands in ``[min_value, max_value]`` combined with each of ``operations``."""

    min_value: int = 0
    max_value: int = 50
    operations: Sequence[str] = field(default_factory=lambda: ("+",))
    # Subtraction only with a >= b, so every answer is a non-negative integer (easier for tiny models).
    non_negative: bool = True

    def validate(self) -> None:
        """Raise ValueError naming the offending field when the task cannot be generated."""
        if self.min_value > self.max_value:
            raise ValueError(f"min_value ({self.min_value}) must be <= max_value ({self.max_value})")
        if not self.operations:
            raise ValueError("operations must name at least one of " + ", ".join(SUPPORTED_OPERATIONS))
        for op in self.operations:
            if op not in SUPPORTED_OPERATIONS:
                raise ValueError(f"unsupported operation {op!r}; supported: {list(SUPPORTED_OPERATIONS)}")


def _apply(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    return a * b


def all_problems(task: ArithmeticTaskConfig) -> list[tuple[int, str, int]]:
    """Enumerate every distinct ``(a, op, b)`` of the task in a fixed order."""
    task.validate()
    values = range(task.min_value, task.max_value + 1)
    problems = []
    for op, a, b in itertools.product(task.operations, values, values):
        if op == "-" and task.non_negative and a < b:
            continue
        problems.append((a, op, b))
    return problems


def make_row(a: int, op: str, b: int, split: str, index: int) -> dict[str, Any]:
    """Build one dataset row in verl's schema for the problem ``a op b``."""
    answer = str(_apply(a, op, b))
    question = PROMPT_TEMPLATE.format(a=a, op=op, b=b)
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "question": question, "answer": answer},
    }


def generate_arithmetic_splits(
    train_size: int = 2000,
    test_size: int = 256,
    seed: int = 0,
    task: ArithmeticTaskConfig | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Draw ``train_size + test_size`` distinct problems (seeded) and split them into disjoint train/test rows.

    Raises ValueError if the task has fewer distinct problems than requested.
    """
    task = task or ArithmeticTaskConfig()
    if train_size < 0 or test_size < 0:
        raise ValueError(f"train_size ({train_size}) and test_size ({test_size}) must be >= 0")
    problems = all_problems(task)
    needed = train_size + test_size
    if needed > len(problems):
        raise ValueError(
            f"asked for {needed} distinct problems (train {train_size} + test {test_size}) but the task "
            f"(values {task.min_value}..{task.max_value}, operations {list(task.operations)}) has only "
            f"{len(problems)}; widen the value range or add operations"
        )
    chosen = random.Random(seed).sample(problems, needed)
    train = [make_row(a, op, b, "train", i) for i, (a, op, b) in enumerate(chosen[:train_size])]
    test = [make_row(a, op, b, "test", i) for i, (a, op, b) in enumerate(chosen[train_size:])]
    return train, test


def generate_arithmetic_rows(
    num_rows: int,
    seed: int = 0,
    task: ArithmeticTaskConfig | None = None,
    split: str = "train",
) -> list[dict[str, Any]]:
    """Generate ``num_rows`` distinct problems as rows of one split (seeded; see generate_arithmetic_splits)."""
    rows, _ = generate_arithmetic_splits(num_rows, 0, seed=seed, task=task)
    for row in rows:
        row["extra_info"]["split"] = split
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str) -> None:
    """Write rows in verl's schema to a parquet file (directories created as needed)."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"refusing to write an empty dataset to {path}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
