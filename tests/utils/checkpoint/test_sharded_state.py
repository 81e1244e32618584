"""Tests of verl/utils/checkpoint/sharded_state.py: per-rank dim-0 shards, their index and reassembly."""

from __future__ import annotations

import json
import os

import pytest
import torch

from verl.utils.checkpoint.sharded_state import (
    ShardSpec,
    load_model_shard,
    reassemble_full_state_dict,
    save_sharded_model,
    shard_index_filename,
    write_model_shard,
    write_shard_index,
)


def _full() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {
        "emb": torch.randn(7, 3, generator=g),  # 7 rows over 3 ranks: 3, 3, 1
        "bias": torch.randn(2, generator=g),  # 2 rows over 3 ranks: 1, 1, 0
        "scale": torch.randn(4, generator=g).to(torch.bfloat16),
        "rep": torch.arange(5),
    }


def _write(path: str, world_size: int, pad: bool) -> None:
    full = _full()
    specs = {k: ShardSpec(list(v.shape), str(v.dtype).removeprefix("torch."), "shard0") for k, v in full.items()}
    specs["rep"].placement = "replicate"
    for rank in range(world_size):
        local = {}
        for k, v in full.items():
            if k == "rep":
                local[k] = v
                continue
            rows = -(-v.shape[0] // world_size)  # ceil, as FSDP2's Shard(0) chunking
            part = v[rank * rows : (rank + 1) * rows]
            if pad and part.shape[0] < rows:
                part = torch.cat([part, torch.zeros(rows - part.shape[0], *v.shape[1:], dtype=v.dtype)])
            local[k] = part
        write_model_shard(local, path, rank, world_size)
    write_shard_index(path, world_size, specs)


@pytest.mark.parametrize("pad", [False, True])
def test_reassemble_uneven_and_padded(tmp_path, pad: bool) -> None:
    _write(str(tmp_path), 3, pad)
    got = reassemble_full_state_dict(str(tmp_path))
    for k, v in _full().items():
        assert got[k].dtype == v.dtype
        assert torch.equal(got[k], v), k
    assert load_model_shard(str(tmp_path), 2, 3)["emb"].shape[0] == (3 if pad else 1)


def test_missing_rank_file_and_world_size_hint(tmp_path) -> None:
    _write(str(tmp_path), 3, pad=False)
    with pytest.raises(FileNotFoundError, match="saved with world size 3, not 2"):
        load_model_shard(str(tmp_path), 0, 2)
    os.remove(tmp_path / "model_world_size_3_rank_1.safetensors")
    with pytest.raises(FileNotFoundError, match="model_world_size_3_rank_1.safetensors"):
        reassemble_full_state_dict(str(tmp_path))


def test_index_shape_mismatch_is_named(tmp_path) -> None:
    _write(str(tmp_path), 2, pad=False)
    index = tmp_path / shard_index_filename(2)
    body = json.loads(index.read_text())
    body["tensors"]["emb"]["shape"] = [9, 3]
    index.write_text(json.dumps(body))
    with pytest.raises(ValueError, match="'emb'"):
        reassemble_full_state_dict(str(tmp_path))
    index.write_text("{not json")
    with pytest.raises(ValueError, match="corrupt shard index"):
        reassemble_full_state_dict(str(tmp_path))


def test_fsdp2_dtensor_model_and_optimizer(tmp_path, single_rank_group) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from verl.utils.checkpoint.checkpoint_manager import load_optimizer, save_optimizer

    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
        # the gloo group is a CPU group: shard on CPU even where a GPU is visible (fully_shard defaults to CUDA)
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    def step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        loss = model(torch.ones(4, 3)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

    model, opt = make()
    step(model, opt)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}  # the live dict aliases the params
    assert isinstance(sd["0.weight"], DTensor)
    save_sharded_model(sd, str(tmp_path / "ckpt"), rank=0, world_size=1)
    index = json.loads((tmp_path / "ckpt" / shard_index_filename(1)).read_text())
    assert index["tensors"]["0.weight"] == {"shape": [5, 3], "dtype": "float32", "placement": "shard0"}
    full = reassemble_full_state_dict(str(tmp_path / "ckpt"))
    for k, v in sd.items():
        assert torch.equal(full[k], v.full_tensor())

    save_optimizer(opt, str(tmp_path / "ckpt"), 0, 1)
    step(model, opt)
    reference = model[0].weight.full_tensor().clone()

    model2, opt2 = make()
    model2.load_state_dict(sd)
    load_optimizer(opt2, str(tmp_path / "ckpt"), 0, 1)
    assert isinstance(opt2.state[model2[0].weight]["exp_avg"], DTensor)
    step(model2, opt2)
    torch.testing.assert_close(model2[0].weight.full_tensor(), reference, rtol=0, atol=0)
