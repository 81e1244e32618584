"""Where the rollout replicas run beside the trainer (verl/trainer/fully_async_policy/placement.py): the
weight-transfer group listens on the trainer's rank 0; a trainer in the driver spawns its replicas, a trainer on Ray
places them on the rollout pool reserved in Ray."""

from __future__ import annotations

import pytest

from verl.trainer.fully_async_policy.placement import place_rollouter


class _RayLikeGroup:
    """What the placement reads of a Ray worker group: rank 0's rendezvous address and the ranks' nodes."""

    master_address_port = ("10.1.2.3", "29500")
    worker_nodes = [("node-a", "10.1.2.3"), ("node-b", "10.1.2.4")]


class _Pool:
    """What the placement reads of the rollout pool's RayResourcePool."""

    store = [1, 1]
    world_size = 2
    removed = False

    def get_placement_groups(self) -> list[str]:
        return ["pg-node0", "pg-node1"]

    def remove(self) -> None:
        self.removed = True


class _WidePool(_Pool):
    """Two nodes of four bundles each."""

    store = [4, 4]
    world_size = 8


def test_a_trainer_on_ray_sends_from_rank_zeros_node_to_the_rollout_pool() -> None:
    pool = _Pool()
    placement = place_rollouter("cpu", _RayLikeGroup(), replicas=2, pool=pool)
    assert (placement.backend, placement.host) == ("gloo", "10.1.2.3")
    assert placement.slots() == [(0, 0), (1, 0)]  # one replica on each node's group
    assert place_rollouter("cuda", _RayLikeGroup(), replicas=2, pool=pool).backend == "nccl"
    placement.release()
    assert pool.removed and placement.pool is None
    with pytest.raises(ValueError, match="rollout pool's 2 bundles do not split into 3 replicas"):
        place_rollouter("cpu", _RayLikeGroup(), replicas=3, pool=pool)
    with pytest.raises(ValueError, match="rollout pool"):
        place_rollouter("cpu", _RayLikeGroup(), replicas=2)


def test_a_trainer_in_the_driver_process_sends_on_loopback() -> None:
    placement = place_rollouter("cpu", object(), replicas=2)
    assert (placement.cuda_visible_devices, placement.host, placement.pool) == ([None, None], "127.0.0.1", None)


def test_tensor_parallel_replicas_take_consecutive_bundles_of_one_node() -> None:
    placement = place_rollouter("cuda", _RayLikeGroup(), replicas=4, pool=_WidePool())
    assert placement.slots(ranks=2) == [(0, 0), (0, 2), (1, 0), (1, 2)]
    assert placement.slots(ranks=4) == [(0, 0), (1, 0)]
