"""RLHFDataset: chat template, left padding, truncation, filtering, bad-data errors, bundled data, collate."""

from __future__ import annotations

import copy
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from omegaconf import OmegaConf

from verl.data.rl_dataset import RLHFDataset, collate_fn

TEMPLATE_OVERHEAD = len("<|user|>") + len("\n") + len("<|assistant|>")  # byte tokenizer: 1 token per byte


def _row(content: str, gt: str = "1", index: int | None = None) -> dict:
    extra = {"split": "train", "index": index} if index is not None else {"split": "train", "index": None}
    return {
        "data_source": "arithmetic",
        "prompt": [{"role": "user", "content": content}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": gt},
        "extra_info": extra,
    }


def _write(path: str, rows: list[dict]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _cfg(**overrides) -> OmegaConf:
    base = {
        "prompt_key": "prompt",
        "max_prompt_length": 40,
        "return_raw_chat": False,
        "filter_overlong_prompts": True,
        "truncation": "error",
        "apply_chat_template": True,
    }
    base.update(overrides)
    return OmegaConf.create(base)


def test_chat_template_left_padding_and_fields(tmp_path, byte_tokenizer):
    path = _write(str(tmp_path / "d.parquet"), [_row("hi", "7", index=5), _row("abcd", "3")])
    ds = RLHFDataset(path, byte_tokenizer, _cfg(return_raw_chat=True))
    assert len(ds) == 2
    item = ds[0]
    text = "<|user|>hi\n<|assistant|>"
    expected_ids = list(text.encode())
    n = len(expected_ids)
    assert n == 2 + TEMPLATE_OVERHEAD
    pad = byte_tokenizer.pad_token_id
    assert item["input_ids"].shape == (40,)
    assert item["input_ids"].tolist() == [pad] * (40 - n) + expected_ids
    assert item["attention_mask"].tolist() == [0] * (40 - n) + [1] * n
    assert item["position_ids"].tolist() == [0] * (40 - n) + list(range(n))
    assert item["raw_prompt_ids"] == expected_ids
    assert item["raw_prompt"] == [{"role": "user", "content": "hi"}]
    assert item["data_source"] == "arithmetic"
    assert item["reward_model"] == {"style": "rule", "ground_truth": "7"}
    assert item["ability"] == "math"
    assert item["index"] == 5  # from extra_info
    assert ds[1]["index"] == 1  # no index in extra_info: the row position
    assert "raw_prompt" not in RLHFDataset(path, byte_tokenizer, _cfg())[0]


def test_raw_content_without_chat_template(tmp_path, byte_tokenizer):
    path = _write(str(tmp_path / "d.parquet"), [_row("hello")])
    item = RLHFDataset(path, byte_tokenizer, _cfg(apply_chat_template=False))[0]
    assert item["raw_prompt_ids"] == list(b"hello")
    tok = copy.deepcopy(byte_tokenizer)
    tok.chat_template = None
    assert RLHFDataset(path, tok, _cfg())[0]["raw_prompt_ids"] == list(b"hello")


def test_no_pad_token_uses_eos(tmp_path):
    from verl.models.tiny import make_byte_tokenizer

    tok = make_byte_tokenizer(with_pad=False)
    assert tok.pad_token_id is None
    path = _write(str(tmp_path / "d.parquet"), [_row("x")])
    item = RLHFDataset(path, tok, _cfg())[0]
    assert item["input_ids"][0].item() == tok.eos_token_id


def test_filter_overlong_prompts(tmp_path, byte_tokenizer, caplog):
    long_content = "y" * 30  # 30 + 22 = 52 tokens > 40
    path = _write(str(tmp_path / "d.parquet"), [_row("a"), _row(long_content), _row("b")])
    with caplog.at_level("WARNING"):
        ds = RLHFDataset(path, byte_tokenizer, _cfg())
    assert len(ds) == 2 and ds.num_filtered == 1
    assert "filtered 1 of 3" in caplog.text
    assert [ds[i]["index"] for i in range(2)] == [0, 2]


def test_truncation_modes(tmp_path, byte_tokenizer):
    content = "z" * 25  # 47 tokens
    path = _write(str(tmp_path / "d.parquet"), [_row("ok"), _row(content)])
    full = list(f"<|user|>{content}\n<|assistant|>".encode())
    left = RLHFDataset(path, byte_tokenizer, _cfg(filter_overlong_prompts=False, truncation="left"))[1]
    assert left["raw_prompt_ids"] == full[-40:] and left["attention_mask"].sum() == 40
    right = RLHFDataset(path, byte_tokenizer, _cfg(filter_overlong_prompts=False, truncation="right"))[1]
    assert right["raw_prompt_ids"] == full[:40]
    # truncation=error fails when the data loads, not at the step that first draws the row
    with pytest.raises(ValueError, match=r"max_prompt_length=40 with data.truncation=error.*d\.parquet row 1: 47 tok"):
        RLHFDataset(path, byte_tokenizer, _cfg(filter_overlong_prompts=False, truncation="error"))
    with pytest.raises(ValueError, match="truncation"):
        RLHFDataset(path, byte_tokenizer, _cfg(truncation="middle"))


def test_multiple_files_and_max_samples(tmp_path, byte_tokenizer):
    a = _write(str(tmp_path / "a.parquet"), [_row("a1"), _row("a2")])
    b = _write(str(tmp_path / "b.parquet"), [_row("b1")])
    ds = RLHFDataset([a, b], byte_tokenizer, _cfg())
    assert len(ds) == 3 and ds.origin(2) == (b, 0)
    assert len(RLHFDataset([a, b], byte_tokenizer, _cfg(max_samples=2))) == 2


def test_tilde_path(tmp_path, byte_tokenizer, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _write(str(tmp_path / "h.parquet"), [_row("a")])
    assert len(RLHFDataset("~/h.parquet", byte_tokenizer, _cfg())) == 1


def _without(row: dict, key: str) -> dict:
    row = dict(row)
    row.pop(key)
    return row


@pytest.mark.parametrize(
    "rows, pattern",
    [
        ([_without(_row("a"), "reward_model")], r"has no column 'reward_model'"),
        ([_without(_row("a"), "data_source")], r"has no column 'data_source'"),
        ([{**_row("a"), "prompt": "just a string"}], r"row 0 column 'prompt': expected a non-empty list"),
        ([_row("a"), {**_row("b"), "prompt": []}], r"row 1 column 'prompt': expected a non-empty list"),
        (
            [_row("a"), {**_row("b"), "prompt": [{"role": "user", "content": None}]}],
            r"row 1 column 'prompt': message 0",
        ),
        (
            [_row("a"), {**_row("b"), "reward_model": {"style": "rule", "ground_truth": None}}],
            r"row 1 column 'reward_model'",
        ),
        ([_row("a"), {**_row("b"), "data_source": None}], r"row 1 column 'data_source': expected a string"),
        ([{**_row("a"), "extra_info": "oops"}], r"row 0 column 'extra_info'"),
        ([{**_row("a"), "ability": 3}], r"row 0 column 'ability'"),
    ],
)
def test_bad_rows_name_file_row_column(tmp_path, byte_tokenizer, rows, pattern):
    path = _write(str(tmp_path / "bad.parquet"), rows)
    with pytest.raises(ValueError, match=pattern) as info:
        RLHFDataset(path, byte_tokenizer, _cfg())
    assert "bad.parquet" in str(info.value)


def test_empty_missing_and_unreadable_files(tmp_path, byte_tokenizer):
    empty = str(tmp_path / "empty.parquet")
    pq.write_table(pa.Table.from_pylist([_row("a")]).slice(0, 0), empty)
    with pytest.raises(ValueError, match=r"empty\.parquet has no rows"):
        RLHFDataset(empty, byte_tokenizer, _cfg())
    with pytest.raises(ValueError, match=r"nope\.parquet does not exist"):
        RLHFDataset(str(tmp_path / "nope.parquet"), byte_tokenizer, _cfg())
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"this is not parquet")
    with pytest.raises(ValueError, match=r"cannot read parquet file .*garbage\.parquet"):
        RLHFDataset(str(garbage), byte_tokenizer, _cfg())


def test_collate_fn_types(tmp_path, byte_tokenizer):
    path = _write(str(tmp_path / "d.parquet"), [_row("ab"), _row("cd")])  # equal-length raw_prompt_ids
    ds = RLHFDataset(path, byte_tokenizer, _cfg(return_raw_chat=True))
    batch = collate_fn([ds[0], ds[1]])
    assert isinstance(batch["input_ids"], torch.Tensor) and batch["input_ids"].shape == (2, 40)
    for key in ("raw_prompt_ids", "raw_prompt", "data_source", "reward_model", "extra_info", "index"):
        assert isinstance(batch[key], np.ndarray) and batch[key].dtype == object and batch[key].shape == (2,)
    assert batch["raw_prompt_ids"][1] == list(b"<|user|>cd\n<|assistant|>")
    assert batch["reward_model"][0]["ground_truth"] == "1"


def test_bundled_arithmetic_loads(byte_tokenizer):
    from verl.data.bundled import resolve_data_path

    train = resolve_data_path("bundled://arithmetic/train.parquet")
    test = resolve_data_path("bundled://arithmetic/test.parquet")
    assert os.path.isfile(train) and os.path.isfile(test)
    ds = RLHFDataset("bundled://arithmetic/test.parquet", byte_tokenizer, _cfg(max_prompt_length=128))
    assert len(ds) == 256
    item = ds[0]
    assert item["data_source"] == "arithmetic"
    content = pq.read_table(test).to_pylist()[0]["prompt"][0]["content"]
    assert content.startswith("What is ") and content.endswith("? Answer with just the number.")
    train_q = {r["prompt"][0]["content"] for r in pq.read_table(train).to_pylist()}
    test_q = {r["prompt"][0]["content"] for r in pq.read_table(test).to_pylist()}
    assert len(train_q) == 2000 and not train_q & test_q
    with pytest.raises(ValueError, match="not found.*available"):
        resolve_data_path("bundled://arithmetic/nothing.parquet")
    with pytest.raises(ValueError, match="outside"):
        resolve_data_path("bundled://../../setup.py")


def test_huge_prompts_are_filtered_before_tokenizing(tmp_path, byte_tokenizer, monkeypatch):
    huge = "w" * 2_000_000
    path = _write(str(tmp_path / "d.parquet"), [_row("a"), _row(huge), _row("b")])
    longest = []
    real_call = type(byte_tokenizer).__call__

    def recording_call(self, text, *args, **kwargs):
        longest.append(len(text))
        return real_call(self, text, *args, **kwargs)

    monkeypatch.setattr(type(byte_tokenizer), "__call__", recording_call)
    ds = RLHFDataset(path, byte_tokenizer, _cfg())
    assert len(ds) == 2 and ds.num_filtered == 1
    assert max(longest) < 1000  # the 2 MB row was never tokenised
    with pytest.raises(ValueError, match=r"d\.parquet row 1: far over the limit \(not tokenised\)"):
        RLHFDataset(path, byte_tokenizer, _cfg(filter_overlong_prompts=False))


def test_agent_name_column_is_kept_for_agent_loops(tmp_path, byte_tokenizer):
    rows = [{**_row("a"), "agent_name": "tool_agent"}, {**_row("b"), "agent_name": None}]
    ds = RLHFDataset(_write(str(tmp_path / "agents.parquet"), rows), byte_tokenizer, _cfg())
    batch = collate_fn([ds[0], ds[1]])
    assert list(batch["agent_name"]) == ["tool_agent", None]  # None: rollout.agent.default_agent_loop
    plain = RLHFDataset(_write(str(tmp_path / "plain.parquet"), [_row("a")]), byte_tokenizer, _cfg())
    assert "agent_name" not in plain[0]


def test_filter_workers_tokenise_in_parallel_with_same_result(tmp_path, byte_tokenizer):
    """data.filter_overlong_prompts_workers=3: forked processes tokenise; rows, ids and the filter are as with 1."""
    rows = [_row("x" * (i % 30), str(i), index=i) for i in range(40)]
    path = _write(str(tmp_path / "d.parquet"), rows)
    one = RLHFDataset(path, byte_tokenizer, _cfg(filter_overlong_prompts_workers=1))
    three = RLHFDataset(path, byte_tokenizer, _cfg(filter_overlong_prompts_workers=3))
    assert one.filter_pids == [os.getpid()]
    assert three.filter_pids and os.getpid() not in three.filter_pids  # tokenised in forked workers
    assert len(three) == len(one) < 40 and three.num_filtered == one.num_filtered > 0
    for key in ("raw_prompt_ids", "index"):
        assert [three[i][key] for i in range(len(three))] == [one[i][key] for i in range(len(one))]
    with pytest.raises(ValueError, match="filter_overlong_prompts_workers must be >= 1, got 0"):
        RLHFDataset(path, byte_tokenizer, _cfg(filter_overlong_prompts_workers=0))


# a chat template that reads a template argument, as Qwen3's reads enable_thinking
_THINK_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
    "<nothink>{% endif %}{% endif %}"
)


def test_apply_chat_template_kwargs_reach_the_template(tmp_path, byte_tokenizer):
    """data.apply_chat_template_kwargs (upstream v0.9; e.g. enable_thinking=false for Qwen3)."""
    import copy

    tok = copy.deepcopy(byte_tokenizer)
    tok.chat_template = _THINK_TEMPLATE
    path = _write(str(tmp_path / "d.parquet"), [_row("hi", "7")])
    plain = RLHFDataset(path, tok, _cfg())[0]["raw_prompt_ids"]
    off = RLHFDataset(path, tok, _cfg(apply_chat_template_kwargs={"enable_thinking": False}))[0]["raw_prompt_ids"]
    assert bytes(plain).decode() == "<|user|>hi\n<|assistant|>"
    assert bytes(off).decode() == "<|user|>hi\n<|assistant|><nothink>"
