"""Dispatch/collect functions and the @register bookkeeping, checked without any backend."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller.base.decorator import (
    MAGIC_ATTR,
    PADDING_SIZE_KEY,
    Dispatch,
    DispatchFns,
    Execute,
    collect_dp_compute_data_proto,
    dispatch_all_to_all,
    dispatch_dp_compute_data_proto,
    dispatch_dp_compute_data_proto_with_func,
    dispatch_one_to_all,
    get_dispatch_fns,
    register,
    register_dispatch_mode,
    registered_methods,
    update_dispatch_mode,
)


def _group(world_size: int, auto_padding: bool = False) -> SimpleNamespace:
    return SimpleNamespace(world_size=world_size, auto_padding=auto_padding)


def _rows(n: int, **meta: Any) -> DataProto:
    return DataProto.from_dict(tensors={"x": torch.arange(n)}, meta_info=meta)


def test_one_to_all_and_all_to_all() -> None:
    assert dispatch_one_to_all(_group(3), 1, k="v") == (([1, 1, 1],), {"k": ["v", "v", "v"]})
    assert dispatch_all_to_all(_group(2), [1, 2], k=("a", "b")) == (([1, 2],), {"k": ["a", "b"]})
    with pytest.raises(ValueError, match=r"keyword argument 'k' is a list of length 3"):
        dispatch_all_to_all(_group(2), [1, 2], k=[1, 2, 3])
    with pytest.raises(ValueError, match="positional argument 0 is 5"):
        dispatch_all_to_all(_group(2), 5)


def test_proto_chunking_broadcasts_other_args() -> None:
    args, kwargs = dispatch_dp_compute_data_proto(_group(3), _rows(6), 2.5, flag=True)
    assert [c.batch["x"].tolist() for c in args[0]] == [[0, 1], [2, 3], [4, 5]]
    assert args[1] == [2.5, 2.5, 2.5] and kwargs == {"flag": [True, True, True]}


def test_proto_padding_and_its_removal() -> None:
    with pytest.raises(ValueError, match=r"7 rows evenly over 3 ranks \(7 % 3 = 1\).*pads to 9 rows"):
        dispatch_dp_compute_data_proto(_group(3), _rows(7))
    # meta_info flag on the batch
    args, kwargs = dispatch_dp_compute_data_proto(_group(3), _rows(7, _verl_auto_padding=True))
    assert kwargs[PADDING_SIZE_KEY] == 2
    # 7 rows + rows 0, 1 repeated = 9 rows in chunks of 3
    assert [c.batch["x"].tolist() for c in args[0]] == [[0, 1, 2], [3, 4, 5], [6, 0, 1]]
    merged = collect_dp_compute_data_proto(_group(3), list(args[0]), padding_size=kwargs[PADDING_SIZE_KEY])
    assert merged.batch["x"].tolist() == list(range(7))
    # group-level flag
    _, kwargs = dispatch_dp_compute_data_proto(_group(4, auto_padding=True), _rows(5))
    assert kwargs[PADDING_SIZE_KEY] == 3
    with pytest.raises(ValueError, match="same number of rows"):
        dispatch_dp_compute_data_proto(_group(2), _rows(2), other=_rows(4))


def test_with_func_needs_a_function_first() -> None:
    def fn(x: Any) -> Any:
        return x

    args, _ = dispatch_dp_compute_data_proto_with_func(_group(2), fn, _rows(4))
    assert args[0] == [fn, fn] and [c.batch["x"].tolist() for c in args[1]] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="function as the first positional argument, got DataProto"):
        dispatch_dp_compute_data_proto_with_func(_group(2), _rows(4))


def test_collect_proto_rejects_non_proto_output() -> None:
    with pytest.raises(TypeError, match="rank 1 returned dict"):
        collect_dp_compute_data_proto(_group(2), [_rows(1), {"a": 1}])


def test_register_records_spec_and_defaults() -> None:
    class W:
        @register(Dispatch.DP_COMPUTE_PROTO, blocking=False)
        def a(self) -> None: ...

        @register(Dispatch.RANK_ZERO)
        def b(self) -> None: ...

        @register()
        def c(self) -> None: ...

        def plain(self) -> None: ...

    class Sub(W):
        @register("ONE_TO_ALL", execute_mode=Execute.RANK_ZERO, materialize_futures=False)
        def d(self) -> None: ...

    specs = registered_methods(Sub)
    assert sorted(specs) == ["a", "b", "c", "d"]
    assert specs["a"].dispatch_mode == Dispatch.DP_COMPUTE_PROTO and specs["a"].blocking is False
    assert specs["a"].execute_mode is Execute.ALL
    assert specs["b"].execute_mode is Execute.RANK_ZERO
    assert specs["c"].dispatch_mode == Dispatch.ALL_TO_ALL and specs["c"].materialize_futures is True
    assert specs["d"].dispatch_mode == Dispatch.ONE_TO_ALL and specs["d"].materialize_futures is False
    assert getattr(Sub.d, MAGIC_ATTR) is specs["d"]


def test_register_errors() -> None:
    with pytest.raises(ValueError, match="unknown dispatch mode 'NOPE'; known modes: ONE_TO_ALL"):
        register("NOPE")
    with pytest.raises(ValueError, match="missing"):
        register({"dispatch_fn": dispatch_one_to_all})
    with pytest.raises(ValueError, match="execute_mode"):
        register(Dispatch.ONE_TO_ALL, execute_mode="ALL")  # type: ignore[arg-type]


def test_user_modes_register_and_update() -> None:
    def dispatch_first_only(worker_group: Any, x: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return ([x] + [None] * (worker_group.world_size - 1),), {}

    def collect_count(worker_group: Any, outputs: list[Any]) -> int:
        return len(outputs)

    name = "TEST_DECORATOR_FIRST_ONLY"
    if not hasattr(Dispatch, name):
        register_dispatch_mode(name, dispatch_first_only, collect_count)
    mode = getattr(Dispatch, name)
    fns = get_dispatch_fns(mode)
    assert fns.dispatch_fn(_group(3), 9) == (([9, None, None],), {})
    assert get_dispatch_fns(name) == fns
    with pytest.raises(ValueError, match="already exists"):
        register_dispatch_mode(name, dispatch_first_only, collect_count)
    update_dispatch_mode(mode, dispatch_one_to_all, collect_count)
    assert get_dispatch_fns(mode).dispatch_fn is dispatch_one_to_all
    with pytest.raises(TypeError, match="collect_fn must be callable"):
        update_dispatch_mode(mode, dispatch_one_to_all, None)  # type: ignore[arg-type]
    # a dict mode works without registering a name
    spec = register({"dispatch_fn": dispatch_first_only, "collect_fn": collect_count})(lambda self: None)
    assert isinstance(getattr(spec, MAGIC_ATTR).dispatch_mode, DispatchFns)


def test_verl_registry_names_and_remove() -> None:
    from verl.single_controller.base.decorator import DISPATCH_MODE_FN_REGISTRY, _check_dispatch_mode

    name = "TEST_DECORATOR_REMOVABLE"
    mode = register_dispatch_mode(name, dispatch_one_to_all, dispatch_one_to_all)
    assert DISPATCH_MODE_FN_REGISTRY[mode]["dispatch_fn"] is dispatch_one_to_all
    _check_dispatch_mode(mode)
    Dispatch.remove(name)
    assert not hasattr(Dispatch, name) and mode not in DISPATCH_MODE_FN_REGISTRY
    with pytest.raises(ValueError, match="unknown dispatch mode"):
        _check_dispatch_mode(mode)
    with pytest.raises(ValueError, match="built-in"):
        Dispatch.remove("ONE_TO_ALL")
    with pytest.raises(ValueError, match="collect_fn"):
        _check_dispatch_mode({"dispatch_fn": dispatch_one_to_all})
