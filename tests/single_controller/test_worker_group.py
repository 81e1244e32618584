"""Every dispatch mode through a 2-rank group on both backends (local in-process, Ray actors on CPU bundles).

The toy worker returns rank-dependent values, so each expected result below is worked out by hand from the
dispatch rule (which rank sees which slice) and the method body.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from verl.protocol import DataProto, DataProtoFuture
from verl.single_controller import ClassWithInitArgs, Dispatch, Execute, Worker, register, register_dispatch_mode
from verl.single_controller.local import LocalWorkerGroup


def _dispatch_strided(worker_group: Any, items: list[int]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    n = worker_group.world_size
    return ([items[r::n] for r in range(n)],), {}


def _collect_sum(worker_group: Any, outputs: list[int]) -> int:
    return sum(outputs)


if not hasattr(Dispatch, "TOY_STRIDED"):
    register_dispatch_mode("TOY_STRIDED", _dispatch_strided, _collect_sum)


class ToyWorker(Worker):
    """Methods whose outputs reveal which rank ran them and which part of the input it saw."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    @register(Dispatch.ONE_TO_ALL)
    def whoami(self, tag: str) -> dict[str, Any]:
        return {"rank": self.rank, "world_size": self.world_size, "tag": tag, "offset": self.offset}

    @register(Dispatch.ONE_TO_ALL)
    def read_env(self) -> dict[str, str]:
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        source = self._dist_env_vars() if self._in_process else os.environ
        return {k: v for k, v in source.items() if k in keys}

    @register(Dispatch.ALL_TO_ALL)
    def add_rank(self, x: int) -> int:
        return x + 10 * self.rank

    @register(Dispatch.RANK_ZERO)
    def rank_zero_echo(self, x: int) -> tuple[int, int]:
        return self.rank, x

    @register(Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def only_rank_zero(self) -> int:
        return 100 + self.rank

    @register(Dispatch.DP_COMPUTE)
    def dp_sum(self, xs: list[int]) -> int:
        return sum(xs) + self.rank

    @register(Dispatch.DP_COMPUTE_PROTO)
    def scale(self, data: DataProto, factor: int = 1) -> DataProto:
        return DataProto.from_dict(
            tensors={"y": data.batch["x"] * factor + 1000 * self.rank},
            non_tensors={"src": data.non_tensor_batch["src"]},
            meta_info={"metrics": {"rows": len(data)}},
        )

    @register(Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def triple_async(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(
            tensors={"x": data.batch["x"] * 3}, non_tensors={"src": data.non_tensor_batch["src"]}
        )

    @register(Dispatch.ONE_TO_ALL, blocking=False)
    def ping_async(self, x: int) -> int:
        return x + self.rank

    @register(Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def apply(self, fn: Any, data: DataProto) -> DataProto:
        return fn(self.rank, data)

    @register(Dispatch.DP_COMPUTE_METRIC)
    def metrics(self, data: DataProto) -> dict[str, int]:
        return {"rank": self.rank, "sum": int(data.batch["x"].sum())}

    @register(Dispatch.TOY_STRIDED)
    def strided_sum(self, items: list[int]) -> int:
        return sum(items) * (self.rank + 1)

    @register(Dispatch.ONE_TO_ALL)
    def fail_on_rank_one(self) -> int:
        if self.rank == 1:
            raise ValueError("rank 1 fails on purpose")
        return self.rank

    @register(Dispatch.ONE_TO_ALL)
    def all_reduce(self, value: float) -> float:
        import torch.distributed as dist

        self.init_distributed()
        t = torch.tensor([value * (self.rank + 1)], dtype=torch.float32)
        dist.all_reduce(t)
        return float(t.item())


def _batch(n: int, auto_padding: bool = False) -> DataProto:
    meta = {"_verl_auto_padding": True} if auto_padding else {}
    return DataProto.from_dict(
        tensors={"x": torch.arange(n)},
        non_tensors={"src": np.array([f"r{i}" for i in range(n)], dtype=object)},
        meta_info=meta,
    )


def _add_rank_tensor(rank: int, data: DataProto) -> DataProto:
    return DataProto.from_dict(tensors={"y": data.batch["x"] + rank})


@pytest.fixture(scope="module")
def local_group() -> LocalWorkerGroup:
    return LocalWorkerGroup(ClassWithInitArgs(ToyWorker, offset=7), world_size=2)


@pytest.fixture(scope="module")
def ray_group(ray_session: None) -> Iterator[Any]:
    import ray
    import ray.cloudpickle

    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    # The test module is not importable by name inside Ray's worker processes: ship its classes by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, max_colocate_count=4, cpus_per_bundle=1)
    # A ray.remote class is accepted as well as a plain one (the colocated test uses a plain class).
    group = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(ToyWorker), offset=7))
    yield group
    group.shutdown()
    pool.remove()


@pytest.fixture(params=["local", "ray"])
def group(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_group")


def test_one_to_all_and_worker_placement(group: Any) -> None:
    assert group.world_size == 2
    assert group.whoami("t") == [
        {"rank": 0, "world_size": 2, "tag": "t", "offset": 7},
        {"rank": 1, "world_size": 2, "tag": "t", "offset": 7},
    ]
    env = group.read_env()
    assert [e["RANK"] for e in env] == ["0", "1"]
    assert all(e["WORLD_SIZE"] == "2" and e["LOCAL_WORLD_SIZE"] == "2" for e in env)
    assert [e["LOCAL_RANK"] for e in env] == ["0", "1"]
    assert env[0]["MASTER_ADDR"] == env[1]["MASTER_ADDR"] and env[0]["MASTER_PORT"] == env[1]["MASTER_PORT"]
    assert int(env[0]["MASTER_PORT"]) > 0


def test_all_to_all_rank_zero_and_dp_compute(group: Any) -> None:
    assert group.add_rank([1, 2]) == [1, 12]
    with pytest.raises(ValueError, match="one entry per rank"):
        group.add_rank([1, 2, 3])
    assert group.rank_zero_echo(5) == (0, 5)
    assert group.only_rank_zero() == 100
    assert group.dp_sum([[1, 2], [3, 4]]) == [3, 8]
    assert group.execute_all_sync("add_rank", [1, 2]) == [1, 12]
    assert group.execute_all_sync("add_rank", 3) == [3, 13]
    assert group.execute_rank_zero_sync("add_rank", 4) == 4


def test_dp_compute_proto_chunks_and_concats(group: Any) -> None:
    out = group.scale(_batch(4), factor=2)
    # rank 0 sees rows 0-1, rank 1 rows 2-3 (+1000)
    assert out.batch["y"].tolist() == [0, 2, 1004, 1006]
    assert out.non_tensor_batch["src"].tolist() == ["r0", "r1", "r2", "r3"]
    assert out.meta_info["metrics"] == {"rows": [2, 2]}


def test_auto_padding_uneven_batch(group: Any) -> None:
    with pytest.raises(ValueError, match=r"5 rows evenly over 2 ranks \(5 % 2 = 1\)"):
        group.scale(_batch(5))
    out = group.scale(_batch(5, auto_padding=True))
    # padded to 6 rows (row 0 repeated): rank 0 gets x=0,1,2, rank 1 x=3,4,0; the padded row is dropped
    assert out.batch["y"].tolist() == [0, 1, 2, 1003, 1004]
    assert out.non_tensor_batch["src"].tolist() == ["r0", "r1", "r2", "r3", "r4"]
    group.auto_padding = True
    try:
        assert len(group.scale(_batch(3))) == 3
        assert group.scale(_batch(3)).batch["y"].tolist() == [0, 1, 1002]
    finally:
        group.auto_padding = False


def test_proto_with_func_and_metric(group: Any) -> None:
    out = group.apply(_add_rank_tensor, _batch(4))
    assert out.batch["y"].tolist() == [0, 1, 3, 4]
    assert group.metrics(_batch(6)) == [{"rank": 0, "sum": 0 + 1 + 2}, {"rank": 1, "sum": 3 + 4 + 5}]
    # the base Worker's generic helper uses the same mode
    out = group.execute_with_func_generator(
        lambda w, d: DataProto.from_dict(tensors={"y": d.batch["x"] * w.rank}), _batch(2)
    )
    assert out.batch["y"].tolist() == [0, 1]


def test_user_registered_dispatch_mode(group: Any) -> None:
    # rank 0 gets [1, 3, 5] (sum 9, x1), rank 1 gets [2, 4, 6] (sum 12, x2)
    assert group.strided_sum([1, 2, 3, 4, 5, 6]) == 9 + 24


def test_non_blocking_futures_chain(group: Any) -> None:
    fut = group.triple_async(_batch(4))
    assert isinstance(fut, DataProtoFuture)
    # the future goes straight into the next call: x -> 3x, then 3x*2 + 1000*rank
    out = group.scale(fut, factor=2)
    assert out.batch["y"].tolist() == [0, 6, 1012, 1018]
    pings = group.ping_async(5)
    assert isinstance(pings, list) and len(pings) == 2
    # a list of per-rank futures is materialized before ALL_TO_ALL: rank r gets 5 + r, then + 10 r
    assert group.add_rank(pings) == [5, 16]


def test_worker_errors_reach_the_driver(group: Any) -> None:
    with pytest.raises(ValueError, match="rank 1 fails on purpose"):
        group.fail_on_rank_one()
    # the group is still usable afterwards
    assert group.add_rank([0, 0]) == [0, 10]


def test_local_and_ray_agree(local_group: Any, ray_group: Any) -> None:
    def scenario(g: Any) -> list[Any]:
        padded = g.scale(_batch(5, auto_padding=True), factor=3)
        return [
            g.whoami("x"),
            g.add_rank([4, 5]),
            g.rank_zero_echo([1]),
            g.dp_sum([[1], [2, 3]]),
            padded.batch["y"].tolist(),
            padded.meta_info["metrics"],
            g.metrics(_batch(2)),
            g.strided_sum([1, 2, 3]),
            g.scale(g.triple_async(_batch(2))).batch["y"].tolist(),
        ]

    assert scenario(local_group) == scenario(ray_group)


def _niceness() -> int:
    return os.nice(0)


def test_a_local_ray_runs_its_workers_at_the_drivers_priority(ray_group: Any) -> None:
    """start_or_join_ray's local Ray: niceness 0, not Ray's 15 (at which any busy process starves the actors)."""
    import ray

    assert ray.get(ray.remote(num_cpus=0)(_niceness).remote()) == 0


def test_all_reduce_over_gloo_between_ray_workers(ray_group: Any) -> None:
    # rank r contributes 1.5 * (r + 1): 1.5 + 3.0 on both ranks
    assert ray_group.all_reduce(1.5) == [4.5, 4.5]


def test_a_group_on_a_slice_of_a_node_takes_those_bundles(ray_session: None) -> None:
    """``RayResourcePool.slice``: a worker group on bundles 1..2 of a node's group of 3 (a tensor-parallel rollout
    replica's share of a node) numbers its ranks from 0, and removing the slice leaves the group to its pool."""
    import ray
    import ray.cloudpickle
    from ray.util.placement_group import placement_group_table

    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    pool = RayResourcePool(process_on_nodes=[3], use_gpu=False, max_colocate_count=1, cpus_per_bundle=0.5)
    part = pool.slice(0, 1, 2)
    with pytest.raises(ValueError, match="outside the pool's groups"):
        pool.slice(0, 2, 2)
    group = RayWorkerGroup(part, RayClassWithInitArgs(ToyWorker, offset=0))
    try:
        env = group.read_env()
        assert [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"]) for e in env] == [("0", "2", "0"), ("1", "2", "1")]
        assert group.all_reduce(1.0) == [3.0, 3.0]  # their own 2-rank world
    finally:
        group.shutdown()
        part.remove()
    assert placement_group_table(pool.pgs[0])["state"] == "CREATED"  # still the pool's
    pool.remove()
