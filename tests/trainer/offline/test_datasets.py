"""Offline datasets: sources, token layout / loss masks on the byte tokenizer, and errors naming field, row and file.

(These cover verl/data/sft_dataset.py and preference_dataset.py, which belong to the offline trainers.)
"""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from verl.data.preference_dataset import KTODataset, PreferenceDataset
from verl.data.sft_dataset import SFTDataset

EOS = 258  # the byte tokenizer: ids 0..255 are bytes, then <pad> 256, <bos> 257, <eos> 258


def test_sft_item_masks_prompt_and_appends_eos(byte_tokenizer) -> None:
    ds = SFTDataset([{"prompt": "ab", "response": "c"}], byte_tokenizer, max_length=16)
    item = ds[0]
    assert item["input_ids"] == [ord("a"), ord("b"), ord("c"), EOS]
    assert item["loss_mask"] == [0, 0, 1, 1]
    batch = ds.collate([ds[0], ds[0]])
    assert batch["input_ids"].shape == (2, 4)


def test_sft_conversation_masks_only_assistant_content(byte_tokenizer) -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    item = SFTDataset([{"messages": msgs}], byte_tokenizer, max_length=64)[0]
    text = "".join(chr(t) for t in item["input_ids"])
    assert text == "<|user|>hi\n<|assistant|>yo\n"
    trained = "".join(chr(t) for t, m in zip(item["input_ids"], item["loss_mask"]) if m)
    assert trained == "yo\n"


def test_sft_conversation_truncation_left_keeps_the_end(byte_tokenizer) -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    full = SFTDataset([{"messages": msgs}], byte_tokenizer, max_length=64)[0]
    left = SFTDataset([{"messages": msgs}], byte_tokenizer, max_length=5, truncation="left")[0]
    right = SFTDataset([{"messages": msgs}], byte_tokenizer, max_length=25, truncation="right")[0]
    assert left["input_ids"] == full["input_ids"][-5:] and left["loss_mask"] == full["loss_mask"][-5:]
    assert right["input_ids"] == full["input_ids"][:25] and sum(right["loss_mask"]) == 1


def test_sft_conversation_with_images_trains_its_last_assistant_reply(byte_tokenizer, monkeypatch) -> None:
    """Upstream's vision-language SFT rows (pokemon captions): messages with <image> plus an images column. The
    turns before the one assistant reply go through the processor; the loss covers the reply only."""
    import torch

    from verl.data import multi_modal_inputs

    seen = {}

    def fake_processor_inputs(processor, messages, images, where):
        seen.update(messages=messages, images=images)
        ids = byte_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return [ord(c) for c in ids], {"pixel_values": torch.zeros(1, 2)}, {}, ids

    monkeypatch.setattr(multi_modal_inputs, "processor_inputs", fake_processor_inputs)
    msgs = [{"role": "user", "content": "<image>what is it?"}, {"role": "assistant", "content": "a cat"}]
    item = SFTDataset([{"messages": msgs, "images": ["img0"]}], byte_tokenizer, processor=object())[0]
    assert seen == {"messages": msgs[:1], "images": ["img0"]}
    trained = "".join(chr(t) for t, m in zip(item["input_ids"], item["loss_mask"]) if m)
    assert trained == "a cat\n" and "pixel_values" in item["multi_modal_inputs"]
    two_replies = [*msgs, {"role": "user", "content": "sure?"}, {"role": "assistant", "content": "yes"}]
    with pytest.raises(ValueError, match=r"row 0: a conversation with images .* only assistant message is the last"):
        SFTDataset([{"messages": two_replies, "images": ["img0"]}], byte_tokenizer, processor=object())


def test_preference_pairs_and_collate_layout(byte_tokenizer) -> None:
    ds = PreferenceDataset([{"prompt": "q", "chosen": "yes", "rejected": "n"}], byte_tokenizer, max_length=16)
    it = ds[0]
    assert it["chosen_input_ids"] == [ord("q"), *map(ord, "yes"), EOS]
    assert it["chosen_loss_mask"] == [0, 1, 1, 1, 1]
    assert it["rejected_input_ids"] == [ord("q"), ord("n"), EOS]
    assert not ds.has_reference
    batch = ds.collate([it])
    assert batch["input_ids"].shape == (2, 5)  # chosen row, then rejected row, padded to 5
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch["loss_mask"][1].tolist() == [0, 1, 1, 0, 0]


def test_chat_prompt_goes_through_template(byte_tokenizer) -> None:
    row = {"prompt": [{"role": "user", "content": "2+2?"}], "chosen": "4", "rejected": "5"}
    it = PreferenceDataset([row], byte_tokenizer, max_length=64)[0]
    prompt_len = it["chosen_loss_mask"].index(1)
    assert "".join(chr(t) for t in it["chosen_input_ids"][:prompt_len]) == "<|user|>2+2?\n<|assistant|>"


def test_truncation_keeps_prompt_end_and_cuts_response(byte_tokenizer) -> None:
    row = {"prompt": "abcdef", "chosen": "xyz", "rejected": "w"}
    it = PreferenceDataset([row], byte_tokenizer, max_length=6, max_prompt_length=4)[0]
    assert it["chosen_input_ids"] == [*map(ord, "cdef"), ord("x"), ord("y")]
    with pytest.raises(ValueError, match="row 0 chosen: prompt has 6 tokens > max_prompt_length=4"):
        PreferenceDataset([row], byte_tokenizer, max_length=6, max_prompt_length=4, truncation="error")
    with pytest.raises(ValueError, match=r"row 0 chosen: prompt \(6 tokens\) \+ response \(4 tokens\) exceeds"):
        PreferenceDataset([row], byte_tokenizer, max_length=8, truncation="error")


def test_missing_field_names_field_and_row(byte_tokenizer) -> None:
    rows = [{"prompt": "a", "chosen": "b", "rejected": "c"}, {"prompt": "a", "chosen": "b"}]
    with pytest.raises(ValueError, match=r"row 1: missing field 'rejected'"):
        PreferenceDataset(rows, byte_tokenizer)
    with pytest.raises(ValueError, match=r"row 0: missing field 'label'"):
        KTODataset([{"prompt": "a", "completion": "b"}], byte_tokenizer)
    with pytest.raises(ValueError, match=r"row 0: missing field 'response'"):
        SFTDataset([{"prompt": "a"}], byte_tokenizer)


def test_missing_field_in_parquet_names_the_file(byte_tokenizer, tmp_path) -> None:
    path = os.path.join(tmp_path, "pairs.parquet")
    pd.DataFrame({"prompt": ["a", "b", "c"], "chosen": ["x", None, "z"], "rejected": ["u", "v", "w"]}).to_parquet(path)
    with pytest.raises(ValueError) as err:
        PreferenceDataset(path, byte_tokenizer)
    msg = str(err.value)
    assert "pairs.parquet row 1" in msg and "'chosen'" in msg


def test_jsonl_source_and_bad_value(byte_tokenizer, tmp_path) -> None:
    path = os.path.join(tmp_path, "kto.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"prompt": "a", "completion": "b", "label": True}) + "\n")
        f.write(json.dumps({"prompt": "c", "completion": "d", "label": "yes"}) + "\n")
    with pytest.raises(ValueError, match=r"kto.jsonl row 1: field 'label' must be a bool"):
        KTODataset(path, byte_tokenizer)


def test_kto_kl_pair_is_next_rows_completion(byte_tokenizer) -> None:
    rows = [
        {"prompt": "p", "completion": "A", "label": True},
        {"prompt": "q", "completion": "B", "label": False},
        {"prompt": "r", "completion": "C", "label": True},
    ]
    ds = KTODataset(rows, byte_tokenizer)
    assert [ds[i]["kl_input_ids"] for i in range(3)] == [
        [ord("p"), ord("B"), EOS],
        [ord("q"), ord("C"), EOS],
        [ord("r"), ord("A"), EOS],
    ]
    assert (ds.num_desirable, ds.num_undesirable) == (2, 1)
    batch = ds.collate([ds[0], ds[1]])
    assert batch["label"].tolist() == [True, False]
    assert batch["input_ids"].shape == (4, 3)


def test_reference_columns_all_or_nothing(byte_tokenizer) -> None:
    full = [{"prompt": "a", "chosen": "b", "rejected": "c", "ref_chosen_logps": -1.0, "ref_rejected_logps": -2.0}]
    ds = PreferenceDataset(full, byte_tokenizer)
    assert ds.has_reference
    assert ds.collate([ds[0]])["ref_rejected_logps"].tolist() == [-2.0]
    partial = full + [{"prompt": "a", "chosen": "b", "rejected": "c"}]
    with pytest.raises(ValueError, match="row 1: reference log-prob columns"):
        PreferenceDataset(partial, byte_tokenizer)


def test_sft_dict_keys_chat_template_and_left_truncation(byte_tokenizer) -> None:
    row = {"extra_info": {"q": {"text": "hi"}, "a": "yo"}}
    ds = SFTDataset(
        [row],
        byte_tokenizer,
        max_length=64,
        prompt_key="extra_info",
        response_key="extra_info",
        prompt_dict_keys=["q", "text"],
        response_dict_keys=["a"],
        apply_chat_template=True,
    )
    text = "".join(chr(t) for t in ds[0]["input_ids"][:-1])
    assert text == "<|user|>hi\n<|assistant|>yo" and ds[0]["input_ids"][-1] == EOS
    with pytest.raises(ValueError, match=r"row 0: field 'extra_info\.q' has no key 'txt'.*\['text'\]"):
        SFTDataset(
            [row], byte_tokenizer, prompt_key="extra_info", response_key="extra_info", prompt_dict_keys=["q", "txt"]
        )
    # left: keep the last max_length tokens (prompt start first, then response start)
    left = SFTDataset([{"prompt": "abcd", "response": "xyz"}], byte_tokenizer, max_length=5, truncation="left")[0]
    assert left["input_ids"] == [*map(ord, "dxyz"), EOS] and left["loss_mask"] == [0, 1, 1, 1, 1]
    only_response = SFTDataset([{"prompt": "ab", "response": "wxyz"}], byte_tokenizer, max_length=3, truncation="left")
    assert only_response[0]["input_ids"] == [ord("y"), ord("z"), EOS] and only_response[0]["loss_mask"] == [1, 1, 1]
