"""N-D mesh dispatch (verl's make_nd_compute_dataproto_dispatch_fn) on a real local worker group."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from verl.protocol import DataProto, DataProtoConfig, DataProtoFuture
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import (
    Dispatch,
    collect_nd_compute,
    dispatch_nd_compute,
    get_predefined_dispatch_fn,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from verl.single_controller.base.worker_group import ClassWithInitArgs
from verl.single_controller.local import LocalWorkerGroup


class MeshWorker(Worker):
    """4 ranks as 2 data-parallel groups of 2 tensor-parallel peers; the first peer of each group is collected."""

    def __init__(self) -> None:
        self._register_dispatch_collect_info("actor", dp_rank=self.rank // 2, is_collect=self.rank % 2 == 0)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def tag(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"x": data.batch["x"] * 10 + self.rank})

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"), blocking=False)
    def tag_async(self, data: DataProto) -> DataProto:
        return self.tag(data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def tag_td(self, data: TensorDict) -> TensorDict:
        lengths = torch.tensor([len(row) for row in data["ids"].unbind(0)])
        return TensorDict({"x": data["x"] * 10 + self.rank, "len": lengths}, batch_size=[len(data)])


def _rows(n: int) -> DataProto:
    return DataProto.from_dict(tensors={"x": torch.arange(n)})


@pytest.fixture
def group():
    wg = LocalWorkerGroup(ClassWithInitArgs(MeshWorker), world_size=4)
    yield wg
    wg.shutdown()


def test_peers_share_a_chunk_and_only_collected_ranks_return(group) -> None:
    out = group.tag(_rows(4))
    # dp rank 0 (ranks 0, 1) gets rows 0-1, dp rank 1 (ranks 2, 3) rows 2-3; ranks 0 and 2 are collected
    assert out.batch["x"].tolist() == [0, 10, 22, 32]
    assert group._dispatch_info["actor"] == [0, 0, 1, 1]
    assert group._collect_info["actor"] == [True, False, True, False]


def test_tensordict_rows_are_split_per_dp_rank(group) -> None:
    ids = torch.nested.as_nested_tensor([torch.arange(n) for n in (1, 2, 3, 4)], layout=torch.jagged)
    out = group.tag_td(TensorDict({"x": torch.arange(4), "ids": ids}, batch_size=[4]))
    assert isinstance(out, TensorDict)
    assert out["x"].tolist() == [0, 10, 22, 32] and out["len"].tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="TensorDicts are not padded"):
        group.tag_td(TensorDict({"x": torch.arange(3)}, batch_size=[3]))


def test_padding_and_non_blocking(group) -> None:
    with pytest.raises(ValueError, match="3 rows evenly over 2 data-parallel ranks"):
        group.tag(_rows(3))
    DataProtoConfig.auto_padding = True
    try:
        assert group.tag(_rows(3)).batch["x"].tolist() == [0, 10, 22]
    finally:
        DataProtoConfig.auto_padding = False
    future = group.tag_async(_rows(4))
    assert isinstance(future, DataProtoFuture)
    assert future.get().batch["x"].tolist() == [0, 10, 22, 32]


def test_unregistered_mesh_is_named() -> None:
    class NoMesh(Worker):
        @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="ref"))
        def run(self, data: DataProto) -> DataProto:
            return data

    wg = LocalWorkerGroup(ClassWithInitArgs(NoMesh), world_size=2)
    try:
        with pytest.raises(ValueError, match=r"no mesh 'ref'.*_register_dispatch_collect_info"):
            wg.run(_rows(2))
    finally:
        wg.shutdown()


def test_list_level_helpers() -> None:
    args, kwargs = dispatch_nd_compute([0, 0, 1], 2, None, ["a", "b"], k=[1, 2])
    assert args == (["a", "a", "b"],) and kwargs == {"k": [1, 1, 2]}
    assert collect_nd_compute([True, False, True], None, [1, 2, 3]) == [1, 3]
    with pytest.raises(ValueError, match="list of 2 entries"):
        dispatch_nd_compute([0, 1], 2, None, ["only one"])
    fns = get_predefined_dispatch_fn(Dispatch.ONE_TO_ALL)
    assert set(fns) == {"dispatch_fn", "collect_fn"}
