"""DataProto behaves as verl's where verl's own tests and recipes rely on it: auto-padding (``from_dict(...,
auto_padding=True)``, ``DataProtoConfig.auto_padding``) in ``chunk`` and in DP dispatch, verl's assertion-style
errors, ``None`` non-tensors, subclass-preserving constructors, TensorDict round trips and column unfolding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl import DataProto
from verl.protocol import DataProtoConfig, DataProtoError, union_numpy_dict, union_tensor_dict
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register


def _data(n: int, **kwargs) -> DataProto:
    return DataProto.from_dict(
        {"a": torch.arange(n)}, {"na": np.array([str(i) for i in range(n)], dtype=object)}, **kwargs
    )


def test_auto_padding_flag_and_uneven_chunk() -> None:
    plain, padded = _data(10), _data(10, auto_padding=True)
    assert not plain.is_padding_enabled() and padded.is_padding_enabled()
    assert padded.meta_info == {DataProtoConfig.auto_padding_key: True}
    # verl tests catch these with pytest.raises(AssertionError); here it is also a ValueError
    with pytest.raises(AssertionError, match="only support equal chunk"):
        plain.chunk(4)
    with pytest.raises(ValueError):
        plain.chunk(3)
    chunks = padded.chunk(4)
    assert [c.batch["a"].tolist() for c in chunks] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert [c.non_tensor_batch["na"].tolist() for c in chunks][-1] == ["9"]
    assert [len(c) for c in _data(5, auto_padding=True).chunk(4)] == [2, 2, 1, 0]
    single = DataProto.from_single_dict({"a": torch.zeros(3), "na": np.zeros(3, dtype=object)}, auto_padding=True)
    assert single.is_padding_enabled()


def test_global_auto_padding_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(DataProtoConfig), "_config", {})
    assert not _data(6).is_padding_enabled()
    DataProtoConfig.auto_padding = True
    assert _data(6).is_padding_enabled() and [len(c) for c in _data(6).chunk(4)] == [2, 2, 2, 0]
    DataProtoConfig.auto_padding = False
    monkeypatch.setenv("VERL_AUTO_PADDING", "1")
    assert _data(6).is_padding_enabled()


class _AddRank(Worker):
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add(self, data: DataProto) -> DataProto:
        data.batch["a"] += 100 * self.rank
        return data


def test_dp_dispatch_pads_a_flagged_batch_and_strips_the_padding() -> None:
    from verl.single_controller.local import ClassWithInitArgs, LocalWorkerGroup

    wg = LocalWorkerGroup(ClassWithInitArgs(_AddRank), world_size=4)
    try:
        out = wg.add(_data(10, auto_padding=True))
        # 10 rows padded to 12, three per rank; the two padding rows (from rank 3) are dropped again
        assert out.batch["a"].tolist() == [0, 1, 2, 103, 104, 105, 206, 207, 208, 309]
        assert out.non_tensor_batch["na"].tolist() == [str(i) for i in range(10)]
        assert len(wg.add(_data(1, auto_padding=True))) == 1
        with pytest.raises(ValueError, match="auto-padding"):
            wg.add(_data(10))
    finally:
        wg.shutdown()


def test_verl_style_errors_are_assertion_errors() -> None:
    obs = torch.randn(4, 3)
    with pytest.raises(AssertionError):
        DataProto.from_dict(tensors={"obs": obs, "act": torch.randn(5, 3)})
    td1 = _data(4).batch
    with pytest.raises(AssertionError, match="a in tensor_dict1 and tensor_dict2 are not the same object"):
        union_tensor_dict(td1, _data(4).batch.apply(lambda t: t + 1))
    with pytest.raises(AssertionError, match="`x` in tensor_dict1 and tensor_dict2 are not the same object."):
        union_numpy_dict({"x": np.arange(3)}, {"x": np.arange(3) + 1})
    assert issubclass(DataProtoError, ValueError) and issubclass(DataProtoError, AssertionError)


def test_union_numpy_dict_object_arrays_nan_and_cycles() -> None:
    nested = np.array([[np.array([1, 2]), "t"], [np.array([3.0, 4.0]), None]], dtype=object)
    union_numpy_dict({"d": nested}, {"d": nested.copy()})
    union_numpy_dict({"d": np.array([1.0, np.nan])}, {"d": np.array([1.0, np.nan])})
    with pytest.raises(AssertionError):
        union_numpy_dict({"d": np.array([1.0, np.nan])}, {"d": np.array([np.nan, 1.0])})
    loop1, loop2 = np.array([None], dtype=object), np.array([None], dtype=object)
    loop1[0], loop2[0] = loop1, loop2
    union_numpy_dict({"d": loop1}, {"d": loop2})
    with pytest.raises(AssertionError):
        union_numpy_dict({"d": loop1}, {"d": np.array([None], dtype=object)})


def test_none_parts_and_subclass_constructors() -> None:
    assert len(DataProto(batch=None, non_tensor_batch=None, meta_info={"i": 1})) == 0

    class MyProto(DataProto):
        pass

    assert type(MyProto.from_single_dict({"x": torch.tensor([0])})) is MyProto
    assert type(MyProto.from_dict({"x": torch.tensor([0])})) is MyProto


def test_tensordict_round_trip() -> None:
    data = DataProto.from_dict(
        tensors={"obs": torch.tensor([1, 2, 3])},
        non_tensors={"labels": ["a", "b", "c"], "rm": [{"gt": 1}, {"gt": 2}, {"gt": 3}]},
        meta_info={"name": "x", "temperature": 0.5},
    )
    td = data.to_tensordict()
    assert torch.equal(td["obs"], torch.tensor([1, 2, 3])) and list(td["labels"]) == ["a", "b", "c"]
    assert td["name"] == "x"
    back = DataProto.from_tensordict(td, meta_info={"extra": 1})
    assert back.non_tensor_batch["rm"].tolist() == [{"gt": 1}, {"gt": 2}, {"gt": 3}]
    assert back.meta_info == {"name": "x", "temperature": 0.5, "extra": 1}
    assert torch.equal(back.batch["obs"], data.batch["obs"])


def test_unfold_column_chunks() -> None:
    data = DataProto.from_dict(
        tensors={"obs1": torch.arange(12).reshape(3, 4), "obs2": torch.tensor([[1, 2], [5, 6], [9, 10]])},
        non_tensors={"labels": ["a", "b", "c"], "parts": [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]]},
        meta_info={"name": "abc"},
    )
    out = data.unfold_column_chunks(2, split_keys=["obs1", "parts"])
    assert out.batch["obs1"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert out.batch["obs2"].tolist() == [[1, 2], [1, 2], [5, 6], [5, 6], [9, 10], [9, 10]]
    assert out.non_tensor_batch["labels"].tolist() == ["a", "a", "b", "b", "c", "c"]
    assert out.non_tensor_batch["parts"].tolist() == [["a1"], ["a2"], ["b1"], ["b2"], ["c1"], ["c2"]]
    assert out.meta_info == {"name": "abc"}
    with pytest.raises(ValueError, match="'obs2'.*divisible by n_split=3"):
        data.unfold_column_chunks(3, split_keys=["obs2"])
    with pytest.raises(KeyError, match="nope"):
        data.unfold_column_chunks(2, split_keys=["nope"])
