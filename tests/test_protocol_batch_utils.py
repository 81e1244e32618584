"""verl's DataProto helpers: DataProtoConfig, tensor (de)serialisation, folding, padding, all-gather over gloo."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from tensordict import TensorDict

from verl.protocol import (
    DataProto,
    DataProtoConfig,
    all_gather_data_proto,
    deserialize_single_tensor,
    deserialize_tensordict,
    fold_batch_dim,
    list_of_dict_to_dict_of_list,
    serialize_single_tensor,
    serialize_tensordict,
    unfold_batch_dim,
    union_two_dict,
)


def test_data_proto_config_auto_padding(monkeypatch) -> None:
    monkeypatch.delenv("VERL_AUTO_PADDING", raising=False)
    assert DataProtoConfig.auto_padding is False
    DataProtoConfig.auto_padding = True
    try:
        assert DataProtoConfig.auto_padding is True
    finally:
        DataProtoConfig.auto_padding = False
    monkeypatch.setenv("VERL_AUTO_PADDING", "1")
    assert DataProtoConfig.auto_padding is True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_single_tensor_round_trip(dtype) -> None:
    t = (torch.arange(12).reshape(3, 4) % 3).to(dtype)
    name, shape, data = serialize_single_tensor(t)
    assert name == str(dtype).removeprefix("torch.") and shape == (3, 4) and data.dtype == np.uint8
    back = deserialize_single_tensor(pickle.loads(pickle.dumps((name, shape, data))))
    assert back.dtype == dtype and torch.equal(back, t)
    assert deserialize_single_tensor(serialize_single_tensor(torch.empty(0, 5))).shape == (0, 5)
    with pytest.raises(ValueError, match="unknown dtype 'nope'"):
        deserialize_single_tensor(("nope", (1,), b"\x00"))


def test_tensordict_round_trip_with_nested() -> None:
    nested = torch.nested.as_nested_tensor([torch.ones(2), torch.zeros(3)], layout=torch.jagged)
    td = TensorDict({"a": torch.randn(2, 3), "ids": torch.tensor([[1, 2], [3, 4]]), "n": nested}, batch_size=[2])
    back = deserialize_tensordict(pickle.loads(pickle.dumps(serialize_tensordict(td))))
    assert back.batch_size == td.batch_size and torch.equal(back["a"], td["a"]) and torch.equal(back["ids"], td["ids"])
    assert [t.tolist() for t in back["n"].unbind()] == [[1.0, 1.0], [0.0, 0.0, 0.0]]


def test_fold_unfold_and_dict_helpers() -> None:
    data = DataProto.from_dict(
        tensors={"x": torch.arange(12).reshape(6, 2)}, non_tensors={"uid": np.array(list("aabbcc"), dtype=object)}
    )
    folded = fold_batch_dim(data, new_batch_size=3)
    assert folded.batch["x"].shape == (3, 2, 2) and folded.non_tensor_batch["uid"].shape == (3, 2)
    unfolded = unfold_batch_dim(folded, batch_dims=2)
    assert torch.equal(unfolded.batch["x"], data.batch["x"]) and list(unfolded.non_tensor_batch["uid"]) == list(
        "aabbcc"
    )
    with pytest.raises(ValueError, match="6 rows do not fold into 4"):
        fold_batch_dim(data, 4)
    assert list_of_dict_to_dict_of_list([{"a": 1, "b": 2}, {"a": 3, "b": 4}]) == {"a": [1, 3], "b": [2, 4]}
    with pytest.raises(ValueError, match="item 1 has key 'c'"):
        list_of_dict_to_dict_of_list([{"a": 1}, {"c": 2}])
    assert union_two_dict({"a": 1}, {"a": 1, "b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="meta_info key 'a'"):
        union_two_dict({"a": 1}, {"a": 2})


def test_padding_in_place() -> None:
    data = DataProto.from_dict(tensors={"x": torch.tensor([1, 2, 3])}, non_tensors={"s": np.array(list("abc"))})
    data.padding(2)
    assert data.batch["x"].tolist() == [1, 2, 3, 3, 3] and list(data.non_tensor_batch["s"]) == list("abccc")
    data.padding(1, padding_candidate="first")
    assert data.batch["x"].tolist() == [1, 2, 3, 3, 3, 1]


def _gather_worker(rank: int, world: int, port: int, queue) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        data = DataProto.from_dict(
            tensors={"x": torch.full((2, 3), float(rank))},
            non_tensors={"who": np.array([f"r{rank}"] * 2, dtype=object)},
        )
        all_gather_data_proto(data)
        queue.put((rank, data.batch["x"][:, 0].tolist(), list(data.non_tensor_batch["who"])))
    finally:
        dist.destroy_process_group()


def test_all_gather_data_proto_over_gloo() -> None:
    from verl.single_controller.base.worker import find_free_port

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = find_free_port()
    procs = [ctx.Process(target=_gather_worker, args=(r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    for _rank, xs, who in results:
        assert xs == [0.0, 0.0, 1.0, 1.0] and who == ["r0", "r0", "r1", "r1"]
