"""Small python helpers verl's code imports from ``verl.utils.py_functional``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["append_to_dict", "convert_to_regular_types", "timeout_limit", "union_two_dict"]


def append_to_dict(data: dict[str, list[Any]], new_data: dict[str, Any]) -> None:
    """Append each value of ``new_data`` to the list ``data[key]`` (created empty when missing), in place.

    Used to collect per-micro-batch metrics: ``{"loss": [0.5]}`` plus ``{"loss": 0.3}`` gives ``{"loss": [0.5, 0.3]}``.
    """
    for key, value in new_data.items():
        data.setdefault(key, []).append(value)


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


def union_two_dict(dict1: dict[str, Any], dict2: dict[str, Any]) -> dict[str, Any]:
    """Add the entries of ``dict2`` to ``dict1`` (in place) and return it; a key in both must hold equal values
    (:class:`~verl.utils.errors.DataProtoError` naming it otherwise). Same function as
    :func:`verl.protocol.union_two_dict`, imported on call so ``verl.utils`` does not import ``verl.protocol``."""
    from verl.protocol.unions import union_two_dict as _union

    return _union(dict1, dict2)


def timeout_limit(seconds: float, use_signals: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: the call raises ``TimeoutError`` if it has not returned within ``seconds``.

    The function runs in a daemon thread; past the limit the caller gets ``TimeoutError`` while the thread is left
    to finish on its own (python cannot stop a thread: for work that must really stop, use
    :class:`verl.utils.sandbox.process_pool.ProcessPool`). ``use_signals`` is accepted for verl's signature; signals
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
