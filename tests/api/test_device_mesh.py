"""DeviceMesh over torch process groups (gloo): metadata, sharding, no re-placement, gradient averaging."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from verl.api.device_mesh import DeviceMesh, data_parallel_mesh, install_gradient_averaging
from verl.api.models import ActorModel


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mesh_metadata_and_recording(single_rank_group):
    model = torch.nn.Linear(2, 2)
    weight = model.weight
    mesh = DeviceMesh("data", dist.group.WORLD, device_type="cpu")
    tp = DeviceMesh("tensor", dist.new_group([0]), device_type="cpu")
    assert (mesh.size, mesh.rank, mesh.ranks) == (1, 0, [0])
    assert mesh.shard(4) == slice(0, 4)
    assert mesh.to_torch().size() == 1 and mesh.to_torch().mesh_dim_names == ("data",)
    actor = ActorModel(model).set_device_mesh(tp, mesh)
    assert actor.device_meshes == [tp, mesh] and data_parallel_mesh(actor.device_meshes) is mesh
    assert actor.model.weight is weight  # nothing was moved or re-sharded
    assert install_gradient_averaging(actor, mesh) == []  # one rank: nothing to average
    with pytest.raises(TypeError, match="verl.DeviceMesh"):
        actor.set_device_mesh("data")


def test_mesh_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already active")
    with pytest.raises(RuntimeError, match="initialised torch.distributed"):
        DeviceMesh("data")


def _two_rank_worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = DeviceMesh("dp", device_type="cpu")
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    install_gradient_averaging(model, mesh)
    # rank r sees input x = r + 1: d(w * x)/dw = x, so the averaged gradient is (1 + 2) / 2 = 1.5 on both ranks
    model(torch.tensor([[float(rank + 1)]])).sum().backward()
    torch.save({"grad": model.weight.grad.item(), "shard": mesh.shard(4)}, os.path.join(out_dir, f"{rank}.pt"))
    dist.destroy_process_group()


def test_gradient_averaging_over_two_ranks(tmp_path):
    mp.spawn(_two_rank_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    results = [torch.load(tmp_path / f"{r}.pt", weights_only=False) for r in range(2)]
    assert [r["grad"] for r in results] == [1.5, 1.5]
    assert [r["shard"] for r in results] == [slice(0, 2), slice(2, 4)]
