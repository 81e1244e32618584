"""Several roles in one process per rank (actor + critic), built through the backend-neutral factory."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller import (
    ClassWithInitArgs,
    Dispatch,
    LocalWorkerGroup,
    Worker,
    create_colocated_worker_groups,
    register,
)
from verl.single_controller.local import create_colocated_worker_cls


class ActorRole(Worker):
    def __init__(self, shift: int) -> None:
        self.shift = shift
        self.updates = 0

    @register(Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        self.updates += 1
        return DataProto.from_dict(tensors={"y": data.batch["x"] + self.shift + 100 * self.rank})

    @register(Dispatch.ONE_TO_ALL)
    def placement(self) -> tuple[int, int, str | None]:
        return os.getpid(), self.rank, self.get_master_addr_port()[1]

    @register(Dispatch.ONE_TO_ALL)
    def num_updates(self) -> int:
        return self.updates


class CriticRole(Worker):
    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"values": data.batch["x"].float() * 2 + self.rank})

    @register(Dispatch.ONE_TO_ALL)
    def placement(self) -> tuple[int, int, str | None]:
        return os.getpid(), self.rank, self.get_master_addr_port()[1]


ROLES = {"actor": (ActorRole, {"shift": 5}), "critic": (CriticRole, {})}


def _check_roles(groups: dict[str, Any]) -> None:
    assert set(groups) == {"actor", "critic"}
    data = DataProto.from_dict(tensors={"x": torch.arange(4)})
    assert groups["actor"].update_actor(data).batch["y"].tolist() == [5, 6, 107, 108]
    assert groups["critic"].compute_values(data).batch["values"].tolist() == [0.0, 2.0, 5.0, 7.0]
    assert groups["actor"].num_updates() == [1, 1]
    # each role group only has its own methods
    assert not hasattr(groups["critic"], "update_actor") and not hasattr(groups["actor"], "compute_values")
    actor_places, critic_places = groups["actor"].placement(), groups["critic"].placement()
    # same process (pid) and same rank/MASTER_PORT for both roles of a rank
    assert actor_places == critic_places
    assert [p[1] for p in actor_places] == [0, 1]
    assert actor_places[0][2] == actor_places[1][2]


def test_local_colocated_spawn() -> None:
    class_dict = {role: ClassWithInitArgs(cls, **kw) for role, (cls, kw) in ROLES.items()}
    fused = LocalWorkerGroup(create_colocated_worker_cls(class_dict), world_size=2)
    # the fused group exposes <role>_<method>
    assert "critic_compute_values" in fused.method_names and "actor_update_actor" in fused.method_names
    groups = fused.spawn(prefix_set=class_dict.keys())
    _check_roles(groups)
    with pytest.raises(ValueError, match="'ref' is not colocated"):
        fused.spawn(["ref"])


def test_local_colocated_factory() -> None:
    _check_roles(create_colocated_worker_groups("local", ROLES, world_size=2))


def test_ray_colocated_factory(ray_session: None) -> None:
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    groups = create_colocated_worker_groups("ray", ROLES, world_size=2, use_gpu=False, name_prefix="coloc_test")
    try:
        _check_roles(groups)
        pids = [p[0] for p in groups["actor"].placement()]
        assert os.getpid() not in pids and pids[0] != pids[1]
    finally:
        groups["actor"].shutdown()
