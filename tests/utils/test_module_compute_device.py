"""module_compute_device: where a module's forward computes, including FSDP2 shards offloaded to CPU."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from verl.utils.device import module_compute_device
from verl.workers.actor.micro_batching import module_device


def test_plain_module_computes_where_its_parameters_are() -> None:
    assert module_compute_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert module_compute_device(torch.nn.ReLU()) == torch.device("cpu")  # no parameters


def test_sharded_parameters_follow_their_mesh_not_their_storage() -> None:
    # FSDP2's CPUOffloadPolicy keeps each shard (a DTensor) in CPU memory on a GPU mesh; a mesh type other than the
    # storage's decides. ``meta`` stands in for the GPU here, so the rule is checked on any machine.
    layer = torch.nn.Linear(2, 2)
    layer.weight.device_mesh = SimpleNamespace(device_type="meta")
    assert module_compute_device(layer) == torch.device("meta")
    assert module_device(layer) == torch.device("meta")  # the actor's and critic's helper is the same rule
    layer.weight.device_mesh = SimpleNamespace(device_type="cpu")  # a CPU mesh: the storage's device
    assert module_compute_device(layer) == torch.device("cpu")


def test_use_torch_compile_auto_compiles_on_cuda_only() -> None:
    from verl.utils.fsdp_utils import resolve_torch_compile

    assert resolve_torch_compile(None, torch.device("cuda", 0)) is True
    assert resolve_torch_compile(None, torch.device("cpu")) is False
    assert resolve_torch_compile(False, torch.device("cuda", 0)) is False  # an explicit value wins
    assert resolve_torch_compile(True, torch.device("cpu")) is True
