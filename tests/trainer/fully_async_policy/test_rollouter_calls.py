"""The rollouter's bookkeeping of requests (verl/trainer/fully_async_policy/rollouter.py), with replicas that answer
in order as the real ones do (one request at a time, first in, first out) but generate nothing: a prompt batch and a
generation call of the trainer's (validation) are split over the replicas in contiguous parts, a call is answered
after the batches already in flight on each replica, and batches come out of ``next_result`` whole, in submission
order."""

from __future__ import annotations

import pickle
from collections import deque

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.fully_async_policy.rollout_process import GENERATE, ROLLOUTS
from verl.trainer.fully_async_policy.rollouter import Rollouter


class InOrderReplica:
    """A replica that answers its requests first in, first out: a prompt batch with its ``tag``, a generation call
    with its own rows and the replica's weight version."""

    def __init__(self, index: int, version: int) -> None:
        self.index, self.version = index, version
        self.requests: deque = deque()
        self.calls: list[str] = []
        self.seeds: list[int | None] = []  # the seed of each request, as queued

    def alive(self) -> bool:
        return True

    def put_request(self, item: bytes) -> None:
        kind, *payload = pickle.loads(item)
        self.seeds.append(payload[1].get("seed") if kind == ROLLOUTS else payload[0].meta_info.get("seed"))
        self.requests.append((kind, *payload))

    def get(self, doing: str) -> DataProto:
        kind, *payload = self.requests.popleft()
        self.calls.append(kind)
        if kind == ROLLOUTS:
            prompts, meta = payload
            tags = torch.full((len(prompts),), meta["tag"])
            out = DataProto.from_dict(tensors={"row": prompts.batch["row"], "tag": tags})
            out.meta_info["partial_rollout_interruptions"] = 1
            return out
        out = payload[0]
        out.meta_info["rollout_weight_version"] = self.version
        return out


def _rollouter(versions: list[int]) -> Rollouter:
    rollouter = Rollouter.__new__(Rollouter)  # the bookkeeping alone: no processes, no engines
    rollouter.replicas = [InOrderReplica(i, v) for i, v in enumerate(versions)]
    rollouter.max_outstanding, rollouter.outstanding, rollouter._submitted = 8, 0, 0
    rollouter.version = max(versions)
    rollouter.served = [0] * len(versions)
    rollouter._route, rollouter._early = deque(), [deque() for _ in versions]
    return rollouter


def _batch(rows: int) -> DataProto:
    return DataProto.from_dict(tensors={"row": torch.arange(rows)})


def test_batches_are_split_over_the_replicas_and_read_back_whole_in_order() -> None:
    rollouter = _rollouter([1, 1])
    rollouter.submit(_batch(3), {"tag": 0})  # rows 0 | 1-2
    rollouter.submit(_batch(1), {"tag": 1})  # one row: the first replica only
    first, second = rollouter.next_result(), rollouter.next_result()
    assert first.batch["row"].tolist() == [0, 1, 2] and first.batch["tag"].tolist() == [0, 0, 0]
    assert first.meta_info["partial_rollout_interruptions"] == 2  # each part's, added up
    assert second.batch["row"].tolist() == [0] and second.batch["tag"].tolist() == [1]
    assert rollouter.served == [2, 1] and rollouter.outstanding == 0


def test_a_generation_call_is_answered_behind_the_batches_in_flight_and_keeps_their_order() -> None:
    rollouter = _rollouter([3, 3])
    for tag, rows in enumerate([2, 1, 2]):  # both replicas hold parts of batches 0 and 2, only the first of 1
        rollouter.submit(_batch(rows), {"tag": tag})
    call = DataProto.from_dict(tensors={"row": torch.arange(5)}, meta_info={"validate": True})
    out = rollouter.generate(call)
    assert out.batch["row"].tolist() == [0, 1, 2, 3, 4]  # parts joined in order: rows 0-1 and 2-4
    assert out.meta_info["rollout_weight_version"] == 3 and out.meta_info["validate"] is True
    expected = [[ROLLOUTS, ROLLOUTS, ROLLOUTS, GENERATE], [ROLLOUTS, ROLLOUTS, GENERATE]]
    assert [r.calls for r in rollouter.replicas] == expected
    tags = [rollouter.next_result().batch["tag"].tolist() for _ in range(3)]
    assert tags == [[0, 0], [1], [2, 2]] and rollouter.outstanding == 0 and rollouter.served == [3, 2]


def test_each_part_samples_with_the_calls_seed_offset_by_its_replica() -> None:
    """As data-parallel rank ``i`` of a synchronous call does: copies of one prompt split over two replicas would
    otherwise draw the same responses (a greedy or unseeded call is unaffected)."""
    rollouter = _rollouter([0, 0, 0])
    rollouter.submit(_batch(6), {"tag": 0, "seed": 40})
    rollouter.generate(DataProto.from_dict(tensors={"row": torch.arange(4)}, meta_info={"seed": 7}))
    rollouter.submit(_batch(2), {"tag": 1})  # unseeded: two parts, no seed
    assert [r.seeds for r in rollouter.replicas] == [[40, 7, None], [41, 8, None], [42, 9]]


def test_a_call_smaller_than_the_pool_uses_as_many_replicas_as_it_has_rows_and_names_the_oldest_weights() -> None:
    rollouter = _rollouter([2, 1, 2])
    out = rollouter.generate(DataProto.from_dict(tensors={"row": torch.arange(2)}))
    assert out.batch["row"].tolist() == [0, 1]
    assert [r.calls for r in rollouter.replicas] == [[GENERATE], [GENERATE], []]
    assert out.meta_info["rollout_weight_version"] == 1
    assert np.array_equal(rollouter.generate(DataProto.from_dict(tensors={"row": torch.arange(1)})).batch["row"], [0])
