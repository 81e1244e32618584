"""Where the rollouter runs beside the trainer (verl/trainer/fully_async_policy/placement.py): the weight-transfer
group listens on the trainer's rank 0, and on CPU nothing is reserved."""

from __future__ import annotations

from verl.trainer.fully_async_policy.placement import place_rollouter


class _RayLikeGroup:
    """What the placement reads of a Ray worker group: rank 0's rendezvous address and the ranks' nodes."""

    master_address_port = ("10.1.2.3", "29500")
    worker_nodes = [("node-a", "10.1.2.3"), ("node-b", "10.1.2.4")]


def test_on_cpu_the_wire_is_gloo_to_rank_zeros_node() -> None:
    placement = place_rollouter("cpu", _RayLikeGroup())
    assert (placement.cuda_visible_devices, placement.backend, placement.host) == ([None], "gloo", "10.1.2.3")
    placement.release()  # nothing reserved: a no-op


def test_a_trainer_in_the_driver_process_sends_on_loopback() -> None:
    placement = place_rollouter("cpu", object(), replicas=2)
    assert (placement.cuda_visible_devices, placement.host, placement.holders) == ([None, None], "127.0.0.1", [])
