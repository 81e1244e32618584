"""verl.utils.tensordict_utils: TensorDicts carrying per-row and batch-level non-tensor data."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu


def _td() -> TensorDict:
    return tu.get_tensordict({"x": torch.arange(3), "turns": [[], [0.5, 0.8], [0.9]]}, {"exp": "e1"})


def test_get_tensordict_and_unwrapping_reads() -> None:
    td = _td()
    assert td.batch_size == torch.Size([3])
    assert tu.get(td, "turns") == [[], [0.5, 0.8], [0.9]] and tu.get(td, "exp") == "e1"
    assert torch.equal(tu.get(td, "x"), torch.arange(3)) and tu.get(td, "missing", 7) == 7
    assert tu.get_non_tensor_data(td, "exp", None) == "e1"
    with pytest.raises(ValueError, match="Batch size of tensor b is not consistent.*Expected 3"):
        tu.get_tensordict({"a": torch.zeros(3), "b": [1, 2]})
    with pytest.raises(TypeError, match="convert them to numpy"):
        tu.get_tensordict({"a": [torch.zeros(1)]})
    assert tu.get_tensordict({}, {"m": 1}).batch_size == torch.Size([])


def test_assign_get_keys_pop_keys() -> None:
    td = TensorDict({"obs": torch.zeros(2, 4)}, batch_size=[2])
    tu.assign_non_tensor(td, meta="run", scores=[[1.0], [2.0, 3.0]])
    assert tu.get(td, "meta") == "run" and tu.get(td, "scores") == [[1.0], [2.0, 3.0]]
    sub = tu.get_keys(td, ["scores", "meta"])
    assert set(sub.keys()) == {"scores", "meta"} and "obs" in td.keys()
    with pytest.raises(KeyError, match="nope"):
        tu.pop_keys(td, ["obs", "nope"])
    assert "obs" in td.keys()  # nothing removed when a key is missing
    popped = tu.pop_keys(td, ["obs"])
    assert "obs" not in td.keys() and popped["obs"].shape == (2, 4)
    assert tu.pop(td, "meta") == "run" and tu.pop(td, "meta", "gone") == "gone"


def test_concat_index_select_union() -> None:
    jag = torch.nested.as_nested_tensor([torch.arange(2), torch.arange(3)], layout=torch.jagged)
    a = tu.get_tensordict({"x": torch.tensor([0, 1]), "seq": jag})
    b = tu.get_tensordict(
        {"x": torch.tensor([2]), "seq": torch.nested.as_nested_tensor([torch.arange(1)], layout=torch.jagged)}
    )
    cat = tu.concat_tensordict([a, b])
    assert cat["x"].tolist() == [0, 1, 2] and [t.tolist() for t in cat["seq"].unbind()] == [[0, 1], [0, 1, 2], [0]]
    picked = tu.index_select_tensor_dict(_td(), [2, 0])
    assert picked["x"].tolist() == [2, 0] and tu.get(picked, "turns") == [[0.9], []] and tu.get(picked, "exp") == "e1"
    base = TensorDict({"x": torch.arange(3)}, batch_size=[3])
    tu.union_tensor_dict(base, TensorDict({"x": torch.arange(3), "y": torch.ones(3)}, batch_size=[3]))
    assert set(base.keys()) == {"x", "y"}
    with pytest.raises(AssertionError, match="x in tensor_dict1 and tensor_dict2 are not the same object"):
        tu.union_tensor_dict(base, TensorDict({"x": torch.zeros(3)}, batch_size=[3]))
    tu.assert_tensordict_eq(cat, tu.concat_tensordict([a, b]))
    with pytest.raises(AssertionError, match="tensor 'x' differs"):
        tu.assert_tensordict_eq(a, tu.get_tensordict({"x": torch.tensor([0, 9]), "seq": jag}))


def test_pad_unpad_and_iterator() -> None:
    td = TensorDict({"x": torch.arange(3)}, batch_size=[3])
    padded, pad = tu.pad_to_divisor(td, 7)
    assert pad == 4 and padded["x"].tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert tu.unpad(padded, pad)["x"].tolist() == [0, 1, 2] and tu.pad_to_divisor(td, 3)[1] == 0
    batches = list(tu.make_iterator(TensorDict({"x": torch.arange(4)}, batch_size=[4]), 2, epochs=2))
    assert [b["x"].tolist() for b in batches] == [[0, 1], [2, 3], [0, 1], [2, 3]]
    with pytest.raises(ValueError, match="4 % 3 != 0"):
        tu.make_iterator(TensorDict({"x": torch.arange(4)}, batch_size=[4]), 3, epochs=1)


def test_contiguous_copies_and_keeps_row_and_batch_level_values():
    from tensordict.tensorclass import NonTensorData, NonTensorStack

    from verl.utils import tensordict_utils as tu

    base = torch.arange(12).reshape(3, 4)
    td = tu.get_tensordict({"x": base.t(), "tags": ["a", "b", "c", "d"]}, {"step": 7})
    assert not td["x"].is_contiguous()
    out = tu.contiguous(td)
    assert out is not td and out["x"].is_contiguous()
    torch.testing.assert_close(out["x"], base.t())
    assert isinstance(out.get("tags"), NonTensorStack) and out.get("tags").tolist() == ["a", "b", "c", "d"]
    assert isinstance(out.get("step"), NonTensorData) and out.get("step").data == 7
    out["x"] += 1  # writing into the copy leaves the input alone
    torch.testing.assert_close(td["x"], base.t())
