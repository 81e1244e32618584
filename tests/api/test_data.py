"""DataProvider: parquet, JSONL, globs, directories, fsspec memory://, prefetch, bad files; prompt encoding."""

from __future__ import annotations

import json
import threading
import time

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from verl.api.data import DataProvider, DataProviderError, encode_prompts


def _write_parquet(path, prompts: list[str]) -> None:
    pq.write_table(pa.table({"prompt": prompts, "ground_truth": [str(i) for i in range(len(prompts))]}), str(path))


def _write_jsonl(path, prompts: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")


def _all_prompts(provider: DataProvider) -> list[str]:
    return [p for batch in provider for p in batch["prompt"]]


def test_parquet_batches_keep_order_and_columns(tmp_path):
    _write_parquet(tmp_path / "a.parquet", [f"q{i}" for i in range(5)])
    provider = DataProvider(str(tmp_path / "a.parquet"), file_format="parquet", batch_size=2)
    batches = list(provider)
    assert [b["prompt"] for b in batches] == [["q0", "q1"], ["q2", "q3"], ["q4"]]
    assert batches[0]["ground_truth"] == ["0", "1"]
    assert provider.num_rows() == 5


def test_drop_last(tmp_path):
    _write_parquet(tmp_path / "a.parquet", [f"q{i}" for i in range(5)])
    provider = DataProvider(str(tmp_path / "a.parquet"), batch_size=2, drop_last=True)
    assert [len(b["prompt"]) for b in provider] == [2, 2]


def test_jsonl(tmp_path):
    _write_jsonl(tmp_path / "a.jsonl", ["x", "y", "z"])
    assert _all_prompts(DataProvider(str(tmp_path / "a.jsonl"), file_format="jsonl", batch_size=2)) == ["x", "y", "z"]


def test_glob_and_directory_read_files_in_sorted_order(tmp_path):
    _write_parquet(tmp_path / "part-1.parquet", ["b0", "b1"])
    _write_parquet(tmp_path / "part-0.parquet", ["a0", "a1", "a2"])
    (tmp_path / "notes.txt").write_text("ignored")
    expected = ["a0", "a1", "a2", "b0", "b1"]
    glob_provider = DataProvider(str(tmp_path / "part-*.parquet"), batch_size=4, num_workers=2)
    assert _all_prompts(glob_provider) == expected
    dir_provider = DataProvider(str(tmp_path), file_format="parquet", batch_size=4, num_workers=2)
    assert _all_prompts(dir_provider) == expected
    # batches span file boundaries: 4 rows then the last one
    assert [len(b["prompt"]) for b in dir_provider] == [4, 1]


def test_memory_url_through_fsspec():
    fs = fsspec.filesystem("memory")
    with fs.open("/verl-test/data/rows.jsonl", "wb") as f:
        f.write(b'{"prompt": "m1"}\n{"prompt": "m2"}\n')
    table = pa.table({"prompt": ["m3"]})
    with fs.open("/verl-test/data/rows2.parquet", "wb") as f:
        pq.write_table(table, f)
    single = DataProvider("memory://verl-test/data/rows.jsonl", batch_size=8)
    assert _all_prompts(single) == ["m1", "m2"]
    both = DataProvider("memory://verl-test/data", batch_size=8)
    assert _all_prompts(both) == ["m1", "m2", "m3"]


def test_bad_file_error_names_it(tmp_path):
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"this is not parquet")
    with pytest.raises(DataProviderError, match="broken.parquet"):
        list(DataProvider(str(bad), batch_size=2))
    bad_json = tmp_path / "broken.jsonl"
    bad_json.write_text('{"prompt": "ok"}\n{not json\n')
    with pytest.raises(DataProviderError, match=r"broken.jsonl: line 2"):
        list(DataProvider(str(bad_json), batch_size=2))
    no_prompt = tmp_path / "noprompt.jsonl"
    no_prompt.write_text('{"question": "q"}\n')
    with pytest.raises(DataProviderError, match=r"noprompt.jsonl: row 0 has no prompt column 'prompt'"):
        list(DataProvider(str(no_prompt), batch_size=2))
    with pytest.raises(DataProviderError, match="does not exist"):
        DataProvider(str(tmp_path / "missing.parquet"))


def test_prefetch_is_bounded_and_runs_ahead(tmp_path):
    _write_parquet(tmp_path / "a.parquet", [f"q{i}" for i in range(40)])
    provider = DataProvider(str(tmp_path / "a.parquet"), batch_size=2, prefetch_factor=3)
    produced: list[int] = []
    original = provider._produce

    def spy(out, stop):
        real_put = out.put

        def put(item, *args, **kwargs):
            real_put(item, *args, **kwargs)
            produced.append(1)

        out.put = put
        original(out, stop)

    provider._produce = spy
    it = iter(provider)
    first = next(it)
    assert first["prompt"] == ["q0", "q1"]
    deadline = time.time() + 5
    while len(produced) < 4 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    # one batch consumed + at most prefetch_factor queued: the producer is ahead but bounded
    assert 2 <= len(produced) <= 1 + 3
    rest = list(it)
    assert len(rest) == 19
    assert not any(t.name == "verl-data-prefetch" and t.is_alive() for t in threading.enumerate())


def test_encode_prompts_left_pads(byte_tokenizer):
    tok = byte_tokenizer
    batch = encode_prompts(["ab", "abcd"], tok, apply_chat_template=False)
    pad = tok.pad_token_id
    assert batch.batch["input_ids"].tolist() == [[pad, pad, 97, 98], [97, 98, 99, 100]]
    assert batch.batch["attention_mask"].tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]
    assert batch.batch["position_ids"].tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
    assert list(batch.non_tensor_batch["data_source"]) == ["api", "api"]
    # a tensor whose leading pad tokens are left padding: they are dropped, the rows re-padded to the longest
    ids = torch.tensor([[pad, 120, 121], [119, 120, 121]])
    t = encode_prompts(ids, tok)
    assert t.batch["input_ids"].tolist() == [[pad, 120, 121], [119, 120, 121]]
    assert t.batch["attention_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    with pytest.raises(ValueError, match="prompt row 1 has 4 tokens > data.max_prompt_length=3"):
        encode_prompts(["ab", "abcd"], tok, max_prompt_length=3, apply_chat_template=False)
    left = encode_prompts(["abcd"], tok, max_prompt_length=3, truncation="left", apply_chat_template=False)
    assert left.batch["input_ids"].tolist() == [[98, 99, 100]]
    rows = encode_prompts({"prompt": ["a"], "ground_truth": ["7"]}, tok, apply_chat_template=False)
    assert rows.non_tensor_batch["reward_model"][0]["ground_truth"] == "7"
