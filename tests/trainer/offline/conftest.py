"""Tiny preference / SFT / KTO datasets and fast trainer options for the offline trainer tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def fast() -> dict[str, object]:
    """Config keys that keep the tests fast and exact on CPU: fp32 compute, file-only logging, CPU device."""
    return {"model.dtype": "float32", "trainer.logger": ["file"], "trainer.device": "cpu"}


@pytest.fixture
def pref_rows() -> list[dict[str, str]]:
    """Four preference pairs with distinct prompts."""
    return [{"prompt": f"Q{i}: 1+{i}=", "chosen": f"{1 + i}.", "rejected": f"no{i}!"} for i in range(4)]


@pytest.fixture
def kto_rows() -> list[dict[str, object]]:
    """Four unpaired rows, two desirable and two undesirable."""
    return [
        {"prompt": "a=", "completion": "1", "label": True},
        {"prompt": "b=", "completion": "xx", "label": False},
        {"prompt": "c=", "completion": "3", "label": True},
        {"prompt": "d=", "completion": "yy", "label": False},
    ]


def read_jsonl(path: str) -> list[dict]:
    import json

    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture
def jsonl():
    """A reader of the JSONL metrics file: ``jsonl(path) -> list of records``."""
    return read_jsonl
