"""Tests of verl/checkpoint/sharded_state.py: per-rank shard files with their index in the safetensors header,
block reads across pieces, and the errors a damaged or mismatched checkpoint raises."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from verl.checkpoint.sharded_state import (
    SHARD_FORMAT,
    ShardReader,
    has_shards,
    hf_weights_state_dict,
    load_state_shards,
    read_full_state_dict,
    read_like,
    save_state_shards,
    shard_filename,
)


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    emb = torch.randn(7, 3, generator=g)
    return {
        "emb": emb,
        "tied": emb,  # the same tensor under a second name (tied embeddings)
        "half": torch.randn(5, 4, generator=g).to(torch.bfloat16),
        "ids": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "mask": torch.tensor([1, 0, 1], dtype=torch.int32),
        "flag": torch.tensor([True, False]),
        "scalar": torch.tensor(2.5),
    }


def _header(file: str) -> dict:
    with safe_open(file, "pt") as f:
        return json.loads(f.metadata()["verl_shards"]), set(f.keys())


def test_round_trip_dtypes_aliases_and_meta(tmp_path) -> None:
    state = _state()
    path = save_state_shards(state, str(tmp_path), "model", rank=0, world_size=1, meta={"class": "x", "n": [1, 2]})
    assert os.path.basename(path) == shard_filename("model", 0, 1) == "model_world_size_1_rank_0.safetensors"
    assert has_shards(str(tmp_path)) and not has_shards(str(tmp_path), "optim")
    header, keys = _header(path)
    assert header["format"] == SHARD_FORMAT and header["world_size"] == 1 and header["rank"] == 0
    assert "tied" not in keys and header["aliases"] == {"tied": "emb"}  # stored once
    assert header["tensors"]["half"] == {"shape": [5, 4], "dtype": "bfloat16", "offset": [0, 0]}

    reader = ShardReader(str(tmp_path))
    assert reader.world_size == 1 and reader.names() == sorted(state)
    assert reader.meta == {"class": "x", "n": [1, 2]}
    for name, value in state.items():
        got = reader.read(name)
        assert got.dtype == value.dtype and got.shape == value.shape, name
        assert torch.equal(got, value), name
    full, meta = read_full_state_dict(str(tmp_path))
    assert set(full) == set(state) and meta["class"] == "x"
    assert torch.equal(full["tied"], state["emb"]) and full["tied"].data_ptr() != full["emb"].data_ptr()


def test_views_are_stored_as_their_own_values(tmp_path) -> None:
    base = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    # a transposed view of a square tensor shares storage, offset, shape and dtype, but is not the same tensor
    state = {"w": base, "w_t": base.t(), "rows": base[1:3], "col": base[:, 2]}
    save_state_shards(state, str(tmp_path), "model", 0, 1)
    reader = ShardReader(str(tmp_path))
    assert reader.aliases == {}
    for name, value in state.items():
        assert torch.equal(reader.read(name), value), name


def test_read_sub_block(tmp_path) -> None:
    full = torch.arange(60, dtype=torch.float32).reshape(5, 4, 3)
    save_state_shards({"x": full}, str(tmp_path), "model", 0, 1)
    reader = ShardReader(str(tmp_path))
    assert torch.equal(reader.read("x", [1, 2, 0], [3, 2, 2]), full[1:4, 2:4, 0:2])
    assert reader.read("x", [4, 0, 0], [1, 4, 3]).shape == (1, 4, 3)
    with pytest.raises(ValueError, match=r"outside 'x' of shape \[5, 4, 3\]"):
        reader.read("x", [4, 0, 0], [2, 4, 3])
    with pytest.raises(ValueError, match="has rank 2, the tensor 3"):
        reader.read("x", [0, 0], [1, 1])
    with pytest.raises(KeyError, match="no tensor 'y'"):
        reader.read("y")


def _write_pieces(path: str, rank: int, world: int, pieces: dict[str, tuple[list[int], list[int], torch.Tensor]]):
    """A shard file as a rank of a ``world``-rank save writes it: name -> (full shape, offset, local block)."""
    index = {
        name: {"shape": shape, "dtype": str(t.dtype).removeprefix("torch."), "offset": offset}
        for name, (shape, offset, t) in pieces.items()
    }
    header = {"format": SHARD_FORMAT, "version": 2, "world_size": world, "rank": rank, "tensors": index}
    header.update(aliases={}, meta={})
    tensors = {name: t.contiguous() for name, (_s, _o, t) in pieces.items()}
    save_file(tensors, os.path.join(path, shard_filename("model", rank, world)), {"verl_shards": json.dumps(header)})


def test_blocks_are_assembled_from_overlapping_pieces(tmp_path) -> None:
    emb = torch.arange(21, dtype=torch.float32).reshape(7, 3)  # rows 3/3/1 over 3 ranks (uneven Shard(0))
    cols = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)  # Shard(1): 2 columns per rank
    for rank, (lo, hi) in enumerate([(0, 3), (3, 6), (6, 7)]):
        c = 2 * rank
        _write_pieces(
            str(tmp_path), rank, 3, {"emb": ([7, 3], [lo, 0], emb[lo:hi]), "cols": ([4, 6], [0, c], cols[:, c : c + 2])}
        )
    reader = ShardReader(str(tmp_path))
    assert reader.world_size == 3 and len(reader.entries["emb"].pieces) == 3
    assert torch.equal(reader.read("emb"), emb)
    assert torch.equal(reader.read("emb", [2, 1], [3, 2]), emb[2:5, 1:3])  # spans rank 0's and rank 1's pieces
    assert torch.equal(reader.read("cols", [1, 1], [2, 4]), cols[1:3, 1:5])  # spans all three
    # read_like with a plain tensor: the whole tensor, in the reference's dtype
    assert torch.equal(read_like(reader, "cols", torch.zeros(4, 6)), cols.float())

    _write_pieces(str(tmp_path), 2, 3, {"cols": ([4, 6], [0, 4], cols[:, 4:6])})  # rank 2 lost its emb rows
    reader = ShardReader(str(tmp_path))
    assert torch.equal(reader.read("emb", [0, 0], [6, 3]), emb[:6])  # what is there still reads
    with pytest.raises(ValueError, match=r"cover 18 of the 21 elements .* of 'emb'"):
        reader.read("emb")


def test_two_rank_save_in_process_and_a_missing_rank_file(tmp_path) -> None:
    state = {"a": torch.randn(3, 2), "b": torch.arange(4)}
    for rank in range(2):  # plain tensors are replicated: rank 0 writes them, rank 1 an empty file
        save_state_shards(state, str(tmp_path), "model", rank, 2)
    assert _header(str(tmp_path / "model_world_size_2_rank_0.safetensors"))[1] == {"a", "b"}
    header, keys = _header(str(tmp_path / "model_world_size_2_rank_1.safetensors"))
    assert keys == set() and header["tensors"] == {} and header["rank"] == 1
    reader = ShardReader(str(tmp_path))
    assert reader.world_size == 2 and torch.equal(reader.read("a"), state["a"])

    os.remove(tmp_path / "model_world_size_2_rank_1.safetensors")
    with pytest.raises(FileNotFoundError, match=r"lack \['model_world_size_2_rank_1.safetensors'\]"):
        ShardReader(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no optim shard files"):
        ShardReader(str(tmp_path), "optim")
    with pytest.raises(ValueError, match="rank 2 is outside world size 2"):
        save_state_shards(state, str(tmp_path), "model", 2, 2)
    with pytest.raises(TypeError, match="'n' is a int, not a tensor"):
        save_state_shards({"n": 3}, str(tmp_path / "other"), "model", 0, 1)


@pytest.mark.parametrize("keep", [4, 20, -8], ids=["header-size", "header", "data"])
def test_truncated_file_is_named(tmp_path, keep: int) -> None:
    file = save_state_shards({"a": torch.randn(8, 8)}, str(tmp_path), "model", 0, 1)
    with open(file, "rb") as f:
        data = f.read()
    with open(file, "wb") as f:
        f.write(data[:keep])
    with pytest.raises(ValueError, match=r"model_world_size_1_rank_0\.safetensors: corrupt or truncated"):
        ShardReader(str(tmp_path))


def test_foreign_safetensors_and_mixed_world_sizes(tmp_path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    save_file({"a": torch.zeros(2)}, str(foreign / "model_world_size_1_rank_0.safetensors"))  # no verl header
    with pytest.raises(ValueError, match=r"model_world_size_1_rank_0\.safetensors: not a verl shard file"):
        ShardReader(str(foreign))

    mixed = tmp_path / "mixed"
    save_state_shards({"a": torch.zeros(2)}, str(mixed), "model", 0, 1)
    for rank in range(2):
        save_state_shards({"a": torch.zeros(2)}, str(mixed), "model", rank, 2)
    with pytest.raises(ValueError, match=r"model shards of several world sizes \[1, 2\]"):
        ShardReader(str(mixed))


def test_load_state_shards_names_and_shapes(tmp_path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    save_state_shards(model.state_dict(), str(tmp_path), "model", 0, 1)
    reader = ShardReader(str(tmp_path))

    torch.manual_seed(5)
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    fresh.load_state_dict(load_state_shards(reader, fresh.state_dict()))
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k

    other = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2), torch.nn.Linear(2, 1))
    with pytest.raises(ValueError, match=r"lack 2 tensors of the model, e\.g\. \['2\.bias', '2\.weight'\]"):
        load_state_shards(reader, other.state_dict())
    renamed = {f"m.{k}": v for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"they hold others, e\.g\. \['0\.bias'"):
        load_state_shards(reader, renamed)
    with pytest.raises(ValueError, match=r"'0\.weight' was saved with shape \[4, 3\], the model has \[5, 3\]"):
        read_like(reader, "0.weight", torch.zeros(5, 3))


def test_fsdp2_dtensor_blocks(tmp_path, single_rank_group) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    def make(seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
        # the gloo group is a CPU group: shard on CPU even where a GPU is visible (fully_shard defaults to CUDA)
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        return model

    model = make(0)
    file = save_state_shards(model.state_dict(), str(tmp_path), "model", 0, 1)
    header, _ = _header(file)
    assert header["tensors"]["0.weight"] == {"shape": [5, 3], "dtype": "float32", "offset": [0, 0]}

    fresh = make(1)
    reader = ShardReader(str(tmp_path))
    loaded = read_like(reader, "0.weight", fresh.state_dict()["0.weight"])
    assert isinstance(loaded, DTensor) and loaded.placements == fresh[0].weight.placements
    fresh.load_state_dict(load_state_shards(reader, fresh.state_dict()))
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k].full_tensor(), v.full_tensor()), k


def test_hf_weights_state_dict_single_and_indexed(tmp_path) -> None:
    a, b = torch.randn(2, 3), torch.randn(4)
    assert hf_weights_state_dict(str(tmp_path)) is None
    save_file({"a": a, "b": b}, str(tmp_path / "model.safetensors"))
    got = hf_weights_state_dict(str(tmp_path))
    assert set(got) == {"a", "b"} and torch.equal(got["a"], a)

    indexed = tmp_path / "indexed"
    indexed.mkdir()
    save_file({"a": a}, str(indexed / "model-00001-of-00002.safetensors"))
    save_file({"b": b}, str(indexed / "model-00002-of-00002.safetensors"))
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (indexed / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    got = hf_weights_state_dict(str(indexed))
    assert set(got) == {"a", "b"} and torch.equal(got["b"], b)
    os.remove(indexed / "model-00002-of-00002.safetensors")
    with pytest.raises(FileNotFoundError, match="lists model-00002-of-00002.safetensors, which is missing"):
        hf_weights_state_dict(str(indexed))
