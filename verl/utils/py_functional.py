"""Small python helpers verl's code imports from ``verl.utils.py_functional``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from verl.utils.errors import DataProtoError

__all__ = ["append_to_dict", "convert_to_regular_types", "timeout_limit", "union_two_dict", "values_equal"]


def append_to_dict(data: dict[str, Any], new_data: dict[str, Any], prefix: str = "") -> None:
    """Collect ``new_data`` into ``data`` in place: each value is appended to ``data[prefix + key]`` (a list value is
    extended instead); ``prefix`` is not added twice to a key that already starts with it.

    A missing slot starts as an empty list, or, for a :class:`~verl.reporting.metric.Metric` value, as an empty
    Metric of the same aggregation (``value.init_list()``), so a metric collected over micro-batches keeps its own
    reduction (upstream v0.9 ``verl.utils.py_functional.append_to_dict``). Example: ``{"loss": [0.5]}`` plus
    ``{"loss": 0.3}`` gives ``{"loss": [0.5, 0.3]}``.
    """
    for key, value in new_data.items():
        slot = key if key.startswith(prefix) else f"{prefix}{key}"
        if slot not in data:
            # duck-typed: verl.utils sits below verl.reporting, where Metric lives
            data[slot] = value.init_list() if callable(getattr(value, "init_list", None)) else []
        if isinstance(value, list):
            data[slot].extend(value)
        else:
            data[slot].append(value)


def convert_to_regular_types(obj: Any) -> Any:
    """Turn OmegaConf containers, numpy scalars / arrays and tuples into plain python (dict, list, int, float, ...),
    recursively, so the result can be serialised (JSON, YAML) or compared with ``==``."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, (DictConfig, ListConfig)):
            return convert_to_regular_types(OmegaConf.to_container(obj, resolve=True))
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    if isinstance(obj, dict):
        return {k: convert_to_regular_types(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [convert_to_regular_types(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return convert_to_regular_types(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def values_equal(a: Any, b: Any, _seen: frozenset[tuple[int, int]] = frozenset()) -> bool:
    """Element equality that treats NaN == NaN and compares arrays / tensors by content.

    Object arrays, dicts and lists are compared element by element. Containers that hold themselves (an object
    array stored in its own cell) compare equal when their structure does: a pair of containers already under
    comparison is taken as equal instead of recursing forever.
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    containers = (np.ndarray, dict, list, tuple)
    if isinstance(a, containers) and isinstance(b, containers):
        pair = (id(a), id(b))
        if pair in _seen:
            return True
        _seen = _seen | {pair}
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return False
        if x.dtype != object and y.dtype != object:
            try:
                return bool(np.array_equal(x, y, equal_nan=True))
            except TypeError:  # equal_nan is unsupported for strings
                return bool(np.array_equal(x, y))
        return all(values_equal(u, v, _seen) for u, v in zip(x.reshape(-1), y.reshape(-1)))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k], _seen) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y, _seen) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def union_two_dict(dict1: dict[str, Any], dict2: dict[str, Any]) -> dict[str, Any]:
    """Add the entries of ``dict2`` to ``dict1`` (in place) and return it; a key in both must hold equal values
    (:class:`~verl.utils.errors.DataProtoError` naming it otherwise). DataProto's ``meta_info`` union
    (:func:`verl.protocol.union_two_dict` is this function)."""
    for key, value in dict2.items():
        if key in dict1:
            if not values_equal(dict1[key], value):
                raise DataProtoError(
                    f"{key} in meta_dict1 and meta_dict2 are not the same object: union conflict on meta_info key "
                    f"{key!r}, {dict1[key]!r} vs {value!r}"
                )
        else:
            dict1[key] = value
    return dict1


def timeout_limit(seconds: float, use_signals: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: the call raises ``TimeoutError`` if it has not returned within ``seconds``.

    The function runs in a daemon thread; past the limit the caller gets ``TimeoutError`` while the thread is left
    to finish on its own (python cannot stop a thread: for work that must really stop, use
    :class:`verl.sandbox.process_pool.ProcessPool`). ``use_signals`` is accepted for verl's signature; signals
    are not used (they only work in the main thread).
    """
    if seconds <= 0:
        raise ValueError(f"timeout_limit: seconds must be > 0, got {seconds}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outcome: dict[str, Any] = {}

            def target() -> None:
                try:
                    outcome["value"] = fn(*args, **kwargs)
                except BaseException as e:  # re-raised in the caller
                    outcome["error"] = e

            thread = threading.Thread(target=target, daemon=True, name=f"timeout_limit:{fn.__name__}")
            thread.start()
            thread.join(seconds)
            if thread.is_alive():
                raise TimeoutError(f"Function {fn.__name__} timed out after {seconds} seconds")
            if "error" in outcome:
                raise outcome["error"]
            return outcome.get("value")

        return wrapper

    return decorator
