"""Tests for verl.protocol: DataProto construction, indexing, key and row operations, persistence, pickling and
DataProtoFuture. Expected values are written out by hand from the batch layouts built below."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl.protocol import (
    DataProto,
    DataProtoFuture,
    DataProtoItem,
    collate_fn,
    pad_dataproto_to_divisor,
    union_numpy_dict,
    union_tensor_dict,
    unpad_dataproto,
)


def make_data(n: int = 4) -> DataProto:
    """Rows i = 0..n-1: obs = [i, 10 + i], score = 0.5 * i, uid = f"u{i}", info = {"k": i}."""
    obs = torch.stack([torch.arange(n), 10 + torch.arange(n)], dim=1)
    score = 0.5 * torch.arange(n, dtype=torch.float32)
    return DataProto.from_dict(
        tensors={"obs": obs, "score": score},
        non_tensors={"uid": [f"u{i}" for i in range(n)], "info": [{"k": i} for i in range(n)]},
        meta_info={"temperature": 1.0},
    )


def rows(data: DataProto) -> list[int]:
    return data.batch["obs"][:, 0].tolist()


# ---- construction ---------------------------------------------------------------------------------------------
def test_from_dict_builds_batch_and_object_arrays() -> None:
    data = make_data(3)
    assert len(data) == 3
    assert data.batch.batch_size == torch.Size([3])
    assert data.non_tensor_batch["uid"].dtype == object
    assert data.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u2"]
    assert data.meta_info == {"temperature": 1.0}


def test_from_dict_keeps_equal_length_inner_lists_one_dimensional() -> None:
    data = DataProto.from_dict(non_tensors={"ids": [[1, 2], [3, 4], [5, 6]]})
    assert data.non_tensor_batch["ids"].shape == (3,)
    assert data.non_tensor_batch["ids"][1] == [3, 4]
    assert len(data) == 3 and data.batch is None


def test_from_dict_num_batch_dims_and_mismatch() -> None:
    data = DataProto.from_dict(tensors={"x": torch.zeros(2, 3, 5), "y": torch.zeros(2, 3)}, num_batch_dims=2)
    assert data.batch.batch_size == torch.Size([2, 3])
    assert len(data) == 2
    with pytest.raises(ValueError, match=r"'y'.*\[3\].*'x'.*\[2\]"):
        DataProto.from_dict(tensors={"x": torch.zeros(2), "y": torch.zeros(3)})


def test_check_consistency_names_key_and_sizes() -> None:
    batch = TensorDict({"x": torch.zeros(4)}, batch_size=[4])
    with pytest.raises(ValueError, match=r"non_tensor_batch\['uid'\] has length 3 .* batch size 4"):
        DataProto(batch=batch, non_tensor_batch={"uid": np.array(["a", "b", "c"], dtype=object)})
    with pytest.raises(TypeError, match="'uid'.*numpy array"):
        DataProto(batch=batch, non_tensor_batch={"uid": ["a", "b", "c", "d"]})


def test_from_single_dict_splits_by_type() -> None:
    data = DataProto.from_single_dict(
        {"x": torch.ones(2, 3), "arr": np.array([7, 8]), "lst": ["p", "q"]}, meta_info={"m": 1}
    )
    assert list(data.batch.keys()) == ["x"]
    assert set(data.non_tensor_batch) == {"arr", "lst"}
    assert data.non_tensor_batch["arr"].tolist() == [7, 8]
    assert data.non_tensor_batch["lst"].tolist() == ["p", "q"]
    assert data.meta_info == {"m": 1}
    with pytest.raises(ValueError, match="'bad'"):
        DataProto.from_single_dict({"x": torch.ones(2), "bad": 3})


# ---- indexing -------------------------------------------------------------------------------------------------
def test_int_index_returns_item() -> None:
    data = make_data(4)
    item = data[2]
    assert isinstance(item, DataProtoItem)
    assert item.batch["obs"].tolist() == [2, 12]
    assert item.batch["score"].item() == 1.0
    assert item.non_tensor_batch == {"uid": "u2", "info": {"k": 2}}
    assert item.meta_info == {"temperature": 1.0}
    assert data[-1].non_tensor_batch["uid"] == "u3"
    assert data[np.int64(1)].non_tensor_batch["uid"] == "u1"
    with pytest.raises(IndexError, match="index 4 out of range"):
        data[4]


@pytest.mark.parametrize(
    "index, expected",
    [
        (slice(1, 3), [1, 2]),
        (slice(None, None, 2), [0, 2]),
        ([3, 0, 0], [3, 0, 0]),
        (np.array([2, 1]), [2, 1]),
        (torch.tensor([1, 3]), [1, 3]),
        (torch.tensor([True, False, False, True]), [0, 3]),
        (np.array([False, True, True, False]), [1, 2]),
        ([], []),
    ],
)
def test_collection_indexing(index, expected: list[int]) -> None:
    data = make_data(4)
    sub = data[index]
    assert isinstance(sub, DataProto)
    assert rows(sub) == expected
    assert sub.non_tensor_batch["uid"].tolist() == [f"u{i}" for i in expected]
    assert sub.meta_info == {"temperature": 1.0}


def test_bool_mask_of_wrong_length_raises() -> None:
    with pytest.raises(ValueError, match="mask"):
        make_data(4)[np.array([True, False])]


def test_iteration_yields_items() -> None:
    assert [item.non_tensor_batch["uid"] for item in make_data(3)] == ["u0", "u1", "u2"]


# ---- key operations -------------------------------------------------------------------------------------------
def test_select_shares_or_copies() -> None:
    data = make_data(3)
    data.meta_info["eos"] = 2
    sub = data.select(batch_keys=["obs"], non_tensor_batch_keys=["uid"], meta_info_keys=["eos"])
    assert list(sub.batch.keys()) == ["obs"]
    assert list(sub.non_tensor_batch) == ["uid"]
    assert sub.meta_info == {"eos": 2}
    sub.batch["obs"][0, 0] = 99  # shared storage without deepcopy
    assert data.batch["obs"][0, 0].item() == 99
    deep = data.select(batch_keys=["obs"], non_tensor_batch_keys=["info"], deepcopy=True)
    deep.batch["obs"][0, 0] = -1
    deep.non_tensor_batch["info"][0]["k"] = 42
    assert data.batch["obs"][0, 0].item() == 99
    assert data.non_tensor_batch["info"][0] == {"k": 0}
    with pytest.raises(KeyError, match="nope"):
        data.select(batch_keys=["nope"])


def test_pop_removes_keys() -> None:
    data = make_data(3)
    popped = data.pop(batch_keys=["score"], non_tensor_batch_keys=["uid"], meta_info_keys=["temperature"])
    assert list(popped.batch.keys()) == ["score"]
    assert popped.batch["score"].tolist() == [0.0, 0.5, 1.0]
    assert popped.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u2"]
    assert popped.meta_info == {"temperature": 1.0}
    assert list(data.batch.keys()) == ["obs"]
    assert list(data.non_tensor_batch) == ["info"]
    assert data.meta_info == {}
    with pytest.raises(KeyError, match="missing"):
        data.pop(batch_keys=["obs", "missing"])
    assert list(data.batch.keys()) == ["obs"]  # a failed pop leaves the data untouched


def test_rename() -> None:
    data = make_data(2).rename("obs", "observations")
    assert sorted(data.batch.keys()) == ["observations", "score"]
    data.rename(["observations", "score"], ["a", "b"])
    assert data.batch["a"].tolist() == [[0, 10], [1, 11]]
    with pytest.raises(KeyError, match="'zzz'"):
        data.rename("zzz", "y")


def test_union_merges_and_detects_conflicts() -> None:
    data = make_data(3)
    extra = DataProto.from_dict(
        tensors={"obs": data.batch["obs"].clone(), "adv": torch.tensor([1.0, 2.0, 3.0])},
        non_tensors={"uid": ["u0", "u1", "u2"], "src": ["a", "b", "c"]},
        meta_info={"temperature": 1.0, "step": 5},
    )
    out = data.union(extra)
    assert out is data
    assert sorted(data.batch.keys()) == ["adv", "obs", "score"]
    assert data.batch["adv"].tolist() == [1.0, 2.0, 3.0]
    assert data.non_tensor_batch["src"].tolist() == ["a", "b", "c"]
    assert data.meta_info == {"temperature": 1.0, "step": 5}

    clash = DataProto.from_dict(tensors={"score": torch.tensor([9.0, 9.0, 9.0])})
    with pytest.raises(ValueError, match="'score'"):
        make_data(3).union(clash)
    with pytest.raises(ValueError, match="'uid'"):
        make_data(3).union(DataProto.from_dict(non_tensors={"uid": ["x", "y", "z"]}))
    with pytest.raises(ValueError, match="'temperature'"):
        make_data(3).union(DataProto(meta_info={"temperature": 0.5}))
    with pytest.raises(ValueError, match="3 vs 2"):
        make_data(3).union(make_data(2))


def test_union_helpers() -> None:
    a = TensorDict({"x": torch.ones(2)}, batch_size=[2])
    b = TensorDict({"y": torch.zeros(2)}, batch_size=[2])
    merged = union_tensor_dict(a, b)
    assert sorted(merged.keys()) == ["x", "y"]
    with pytest.raises(ValueError, match="different sizes"):
        union_tensor_dict(a, TensorDict({"z": torch.ones(3)}, batch_size=[3]))
    d1 = {"v": np.array([1.0, float("nan")], dtype=object)}
    out = union_numpy_dict(d1, {"v": np.array([1.0, float("nan")], dtype=object), "w": np.array([1, 2])})
    assert sorted(out) == ["v", "w"]  # NaN == NaN for the purpose of union
    with pytest.raises(ValueError, match="'v'"):
        union_numpy_dict(d1, {"v": np.array([1.0, 2.0], dtype=object)})


# ---- row operations -------------------------------------------------------------------------------------------
def test_concat_merges_metrics() -> None:
    a, b = make_data(2), make_data(3)
    a.meta_info["metrics"] = {"loss": 0.5, "grad_norm": [1.0, 2.0]}
    b.meta_info["metrics"] = {"loss": 0.25, "lr": 0.1}
    b.meta_info["only_b"] = "x"
    out = DataProto.concat([a, b])
    assert rows(out) == [0, 1, 0, 1, 2]
    assert out.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u0", "u1", "u2"]
    assert out.meta_info["temperature"] == 1.0 and out.meta_info["only_b"] == "x"  # every part's keys
    assert out.meta_info["metrics"] == {"loss": [0.5, 0.25], "grad_norm": [1.0, 2.0], "lr": [0.1]}
    assert a.meta_info["metrics"] == {"loss": 0.5, "grad_norm": [1.0, 2.0]}  # inputs untouched


def test_concat_merges_per_worker_metric_lists_and_refuses_conflicts() -> None:
    """Upstream's concat: ``metrics`` may be a list of per-worker dicts (flattened to a dict of lists, also when the
    first part has none); a key held by two parts with different values is refused unless the first one wins."""
    a, b, c = make_data(2), make_data(2), make_data(2)
    b.meta_info["metrics"] = [{"loss": 0.5, "acc": 0.9}]
    c.meta_info["metrics"] = [{"loss": 0.6, "acc": 0.8}, {"loss": 0.7}]
    out = DataProto.concat([a, b, c])
    assert out.meta_info["metrics"] == {"loss": [0.5, 0.6, 0.7], "acc": [0.9, 0.8]}
    assert "metrics" not in DataProto.concat([make_data(1), make_data(1)]).meta_info
    b.meta_info["temperature"] = 0.7
    with pytest.raises(AssertionError, match="Conflicting values for meta_info key 'temperature'"):
        DataProto.concat([a, b])
    assert DataProto.concat([a, b], meta_info_conflicts="first").meta_info["temperature"] == 1.0
    c.meta_info["metrics"] = ["not a dict"]
    with pytest.raises(ValueError, match="part 1: meta_info\\['metrics'\\] must be a dict"):
        DataProto.concat([a, c])


def test_concat_rejects_mismatched_keys() -> None:
    other = make_data(2)
    other.pop(non_tensor_batch_keys=["info"])
    with pytest.raises(ValueError, match="non-tensor keys"):
        DataProto.concat([make_data(2), other])
    with pytest.raises(ValueError, match="at least one"):
        DataProto.concat([])


def test_chunk_and_split() -> None:
    data = make_data(6)
    chunks = data.chunk(3)
    assert [rows(c) for c in chunks] == [[0, 1], [2, 3], [4, 5]]
    assert [c.non_tensor_batch["uid"].tolist() for c in chunks] == [["u0", "u1"], ["u2", "u3"], ["u4", "u5"]]
    assert [rows(s) for s in data.split(4)] == [[0, 1, 2, 3], [4, 5]]
    with pytest.raises(ValueError, match=r"Got size of DataProto 10 and chunk 3.*pad"):
        make_data(10).chunk(3)


def test_repeat_interleave_and_tile() -> None:
    data = make_data(2)
    inter = data.repeat(repeat_times=3, interleave=True)
    assert rows(inter) == [0, 0, 0, 1, 1, 1]
    assert inter.non_tensor_batch["uid"].tolist() == ["u0", "u0", "u0", "u1", "u1", "u1"]
    assert inter.batch["score"].tolist() == [0.0, 0.0, 0.0, 0.5, 0.5, 0.5]
    tiled = data.repeat(repeat_times=2, interleave=False)
    assert rows(tiled) == [0, 1, 0, 1]
    assert tiled.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u0", "u1"]
    assert rows(data.sample_level_repeat([2, 1])) == [0, 0, 1]


def test_reorder_in_place() -> None:
    data = make_data(4)
    assert data.reorder(torch.tensor([3, 1, 0, 2])) is None
    assert rows(data) == [3, 1, 0, 2]
    assert data.non_tensor_batch["uid"].tolist() == ["u3", "u1", "u0", "u2"]
    assert data.batch["score"].tolist() == [1.5, 0.5, 0.0, 1.0]


def test_to_device_returns_self() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = make_data(2)
    assert data.to(device) is data
    assert data.batch["obs"].device.type == device


def test_pad_unpad_round_trip_uneven() -> None:
    data = make_data(5)
    padded, pad_size = pad_dataproto_to_divisor(data, 4)
    assert pad_size == 3
    assert rows(padded) == [0, 1, 2, 3, 4, 0, 1, 2]
    assert padded.non_tensor_batch["uid"].tolist()[5:] == ["u0", "u1", "u2"]
    assert [rows(c) for c in padded.chunk(4)] == [[0, 1], [2, 3], [4, 0], [1, 2]]
    restored = unpad_dataproto(padded, pad_size)
    assert rows(restored) == [0, 1, 2, 3, 4]
    assert restored.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u2", "u3", "u4"]
    # padding larger than the batch cycles through its rows
    small, pad = pad_dataproto_to_divisor(make_data(2), 5)
    assert (pad, rows(small)) == (3, [0, 1, 0, 1, 0])
    same, pad0 = pad_dataproto_to_divisor(make_data(4), 2)
    assert pad0 == 0 and len(same) == 4
    assert len(unpad_dataproto(same, 0)) == 4
    metrics_only = DataProto(meta_info={"metrics": {"loss": [1.0]}})
    assert unpad_dataproto(metrics_only, 2) is metrics_only
    with pytest.raises(ValueError, match=r"pad_size must be in \[0, 4\]"):
        unpad_dataproto(same, 5)


def test_collate_fn_stacks_items() -> None:
    data = make_data(3)
    out = collate_fn([data[2], data[0]])
    assert rows(out) == [2, 0]
    assert out.non_tensor_batch["info"].tolist() == [{"k": 2}, {"k": 0}]
    assert out.meta_info == {"temperature": 1.0}


def test_make_iterator_sequential_and_seeded_shuffle() -> None:
    data = make_data(6)
    seq = [rows(mb) for mb in data.make_iterator(mini_batch_size=2, epochs=2)]
    assert seq == [[0, 1], [2, 3], [4, 5]] * 2

    def shuffled(seed: int) -> list[list[int]]:
        it = data.make_iterator(mini_batch_size=3, epochs=2, seed=seed, dataloader_kwargs={"shuffle": True})
        return [rows(mb) for mb in it]

    first = shuffled(7)
    assert first == shuffled(7)  # same seed, same order
    assert len(first) == 4
    assert sorted(first[0] + first[1]) == [0, 1, 2, 3, 4, 5]  # each epoch is a permutation
    assert sorted(first[2] + first[3]) == [0, 1, 2, 3, 4, 5]
    expected = torch.randperm(6, generator=torch.Generator().manual_seed(7)).tolist()
    assert first[0] + first[1] == expected
    mb = next(iter(data.make_iterator(2, 1, dataloader_kwargs={"shuffle": True})))
    assert mb.non_tensor_batch["uid"].tolist() == [f"u{i}" for i in rows(mb)]  # non-tensors follow the rows
    with pytest.raises(ValueError, match="not divisible"):
        data.make_iterator(mini_batch_size=4, epochs=1)
    assert [rows(m) for m in data.make_iterator(4, 1, dataloader_kwargs={"drop_last": True})] == [[0, 1, 2, 3]]


# ---- persistence ----------------------------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path) -> None:
    data = make_data(3)
    data.non_tensor_batch["reward_model"] = np.array(
        [{"style": "rule", "ground_truth": str(i)} for i in range(3)], dtype=object
    )
    data.non_tensor_batch["index"] = np.array([10, 11, 12])
    data.non_tensor_batch["ids"] = DataProto.from_dict(
        non_tensors={"a": [np.array([1, 2]), [3], (4, 5)]}
    ).non_tensor_batch["a"]
    data.meta_info.update({"eos_token_id": [1, 2], "ratio": np.float32(0.5), "t": torch.tensor([1.0, 2.0])})
    path = tmp_path / "sub" / "data.pt"
    data[0:3].save_to_disk(path)
    assert sorted(os.listdir(path.parent)) == ["data.pt"]  # no temp file left behind
    loaded = DataProto.load_from_disk(path)
    assert torch.equal(loaded.batch["obs"], data.batch["obs"])
    assert loaded.batch["score"].dtype == torch.float32
    assert loaded.non_tensor_batch["reward_model"].tolist() == [
        {"style": "rule", "ground_truth": "0"},
        {"style": "rule", "ground_truth": "1"},
        {"style": "rule", "ground_truth": "2"},
    ]
    assert loaded.non_tensor_batch["info"].dtype == object
    assert loaded.non_tensor_batch["index"].dtype == np.int64
    assert loaded.non_tensor_batch["index"].tolist() == [10, 11, 12]
    ids = loaded.non_tensor_batch["ids"]
    assert isinstance(ids[0], np.ndarray) and ids[0].tolist() == [1, 2]
    assert ids[1] == [3] and ids[2] == (4, 5)
    assert loaded.meta_info["eos_token_id"] == [1, 2]
    assert loaded.meta_info["ratio"] == 0.5
    assert torch.equal(loaded.meta_info["t"], torch.tensor([1.0, 2.0]))
    assert loaded.meta_info["temperature"] == 1.0


def test_save_rejects_unsafe_values_and_keeps_old_file(tmp_path) -> None:
    path = tmp_path / "d.pt"
    make_data(2).save_to_disk(path)
    bad = make_data(2)
    bad.non_tensor_batch["obj"] = np.array([object(), object()], dtype=object)
    with pytest.raises(ValueError, match=r"non_tensor_batch\['obj'\]\[0\]"):
        bad.save_to_disk(path)
    bad2 = make_data(2)
    bad2.meta_info["fn"] = len
    with pytest.raises(ValueError, match=r"meta_info\['fn'\]"):
        bad2.save_to_disk(path)
    assert len(DataProto.load_from_disk(path)) == 2  # the earlier file is intact
    assert sorted(os.listdir(tmp_path)) == ["d.pt"]


def test_load_rejects_foreign_files(tmp_path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"hello": 1}, path)
    with pytest.raises(ValueError, match="not a DataProto file"):
        DataProto.load_from_disk(path)


# ---- pickling -------------------------------------------------------------------------------------------------
def test_pickle_round_trip_and_size() -> None:
    data = DataProto.from_dict(
        tensors={"input_ids": torch.randint(0, 1000, (64, 2048), dtype=torch.int64)},
        non_tensors={"uid": [str(i) for i in range(64)]},
        meta_info={"eos_token_id": 2},
    )
    raw = 64 * 2048 * 8
    blob = pickle.dumps(data)
    assert len(blob) < raw * 1.02 + 8192
    back = pickle.loads(blob)
    assert torch.equal(back.batch["input_ids"], data.batch["input_ids"])
    assert back.non_tensor_batch["uid"].tolist() == [str(i) for i in range(64)]
    assert back.meta_info == {"eos_token_id": 2}
    # a chunk is a view of the full storage; it must pickle at its own size, not the parent's
    quarter = data.chunk(4)[1]
    q_blob = pickle.dumps(quarter)
    assert len(q_blob) < raw / 4 * 1.02 + 8192
    assert torch.equal(pickle.loads(q_blob).batch["input_ids"], data.batch["input_ids"][16:32])


def test_pickle_nested_and_empty() -> None:
    td = TensorDict({"a": torch.ones(2, 3), "nested": {"b": torch.zeros(2)}}, batch_size=[2])
    back = pickle.loads(pickle.dumps(DataProto(batch=td)))
    assert back.batch["nested", "b"].tolist() == [0.0, 0.0]
    assert back.batch.batch_size == torch.Size([2])
    empty = pickle.loads(pickle.dumps(DataProto()))
    assert len(empty) == 0 and empty.batch is None


# ---- DataProtoFuture ------------------------------------------------------------------------------------------
def test_future_resolves_concurrent_futures_and_values() -> None:
    with ThreadPoolExecutor(max_workers=1) as pool:
        fut = pool.submit(make_data, 2)
        future = DataProtoFuture.concat([fut, make_data(2)])
        out = future.get()
    assert rows(out) == [0, 1, 0, 1]


def test_future_chunk_and_dispatch() -> None:
    future = DataProtoFuture(collect_fn=DataProto.concat, futures=[make_data(2), make_data(4)])
    parts = future.chunk(3)
    assert [rows(p.get()) for p in parts] == [[0, 1], [0, 1], [2, 3]]
    doubled = DataProtoFuture(collect_fn=sum, futures=[1, 2, 3], dispatch_fn=lambda x: 2 * x)
    assert doubled.get() == 12


def test_get_data_info_lists_keys_and_size() -> None:
    info = make_data(4).get_data_info()
    assert "DataProto(len=4)" in info
    assert "batch['obs']: (4, 2) torch.int64" in info
    assert "non_tensor_batch['uid']: (4,) object" in info
    # obs: 4*2 int64 = 64 bytes, score: 4 float32 = 16 bytes -> 80 / 2**20 MB
    assert f"tensor size: {80 / 1024**2:.3f} MB" in info


def test_import_does_not_pull_in_ray() -> None:
    code = "import sys, verl.protocol; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
