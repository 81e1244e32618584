"""Arithmetic task generator and the GSM8K preprocessing example."""

from __future__ import annotations

import importlib.util
import json
import os
import re

import pyarrow.parquet as pq
import pytest

from verl.data.arithmetic_task import (
    ArithmeticTaskConfig,
    generate_arithmetic_rows,
    generate_arithmetic_splits,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUESTION_RE = re.compile(r"What is (\d+) ([-+*]) (\d+)\? Answer with just the number\.")


def _load_example(name: str):
    path = os.path.join(REPO, "examples", "data_preprocess", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_schema_and_answers():
    rows = generate_arithmetic_rows(50, seed=1)
    assert len(rows) == 50
    for row in rows:
        assert row["data_source"] == "arithmetic"
        a, op, b = QUESTION_RE.fullmatch(row["prompt"][0]["content"]).groups()
        assert op == "+" and 0 <= int(a) <= 50 and 0 <= int(b) <= 50
        assert row["reward_model"]["ground_truth"] == str(int(a) + int(b))
    assert generate_arithmetic_rows(50, seed=1) == rows  # seeded
    assert generate_arithmetic_rows(50, seed=2) != rows


def test_operations_ranges_and_disjoint_splits():
    task = ArithmeticTaskConfig(min_value=5, max_value=9, operations=("-", "*"))
    train, test = generate_arithmetic_splits(20, 10, seed=0, task=task)
    questions = [r["prompt"][0]["content"] for r in train + test]
    assert len(set(questions)) == 30
    for row in train + test:
        a, op, b = QUESTION_RE.fullmatch(row["prompt"][0]["content"]).groups()
        a, b = int(a), int(b)
        assert 5 <= a <= 9 and 5 <= b <= 9
        expected = a - b if op == "-" else a * b
        assert op != "-" or a >= b  # non-negative by default
        assert row["reward_model"]["ground_truth"] == str(expected)
    with pytest.raises(ValueError, match="has only 40"):  # 15 (a>=b) subtractions + 25 products
        generate_arithmetic_splits(40, 1, task=task)
    with pytest.raises(ValueError, match="unsupported operation '/'"):
        generate_arithmetic_rows(1, task=ArithmeticTaskConfig(operations=("/",)))


def test_arithmetic_script_writes_parquet(tmp_path):
    module = _load_example("arithmetic")
    module.main(["--local_dir", str(tmp_path), "--train_size", "30", "--test_size", "5", "--operations", "+,-"])
    train = pq.read_table(str(tmp_path / "train.parquet")).to_pylist()
    test = pq.read_table(str(tmp_path / "test.parquet")).to_pylist()
    assert len(train) == 30 and len(test) == 5
    assert test[0]["extra_info"]["split"] == "test"


def test_gsm8k_conversion_from_local_jsonl(tmp_path):
    module = _load_example("gsm8k")
    raw = tmp_path / "raw"
    raw.mkdir()
    records = [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
        {"question": "A car costs $1,200 more than $800. Total?", "answer": "1200 + 800 = 2000\n#### 2,000"},
    ]
    for split in ("train", "test"):
        with open(raw / f"{split}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    out = tmp_path / "out"
    module.main(["--input_dir", str(raw), "--local_dir", str(out)])
    rows = pq.read_table(str(out / "train.parquet")).to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["7", "2000"]
    assert rows[0]["data_source"] == "openai/gsm8k"
    assert rows[0]["prompt"][0]["content"] == (
        'Tom has 3 apples and buys 4. How many? Let\'s think step by step and output the final answer after "####".'
    )
    with pytest.raises(ValueError, match=r"row 0: reference answer has no '#### <number>'"):
        module.convert_records([{"question": "q", "answer": "no marker"}], "train", "x.jsonl")
