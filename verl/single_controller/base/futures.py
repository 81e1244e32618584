"""Backend-neutral handling of futures: Ray ``ObjectRef``, ``concurrent.futures.Future`` and ``DataProtoFuture``.

Ray is never imported here: an ``ObjectRef`` can only exist once Ray has been imported by the caller, so the type
check goes through ``sys.modules``.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future
from typing import Any


def _is_object_ref(value: Any) -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and isinstance(value, ray.ObjectRef)


def is_future(value: Any) -> bool:
    """True for a Ray ``ObjectRef``, a ``concurrent.futures.Future`` or a ``DataProtoFuture``."""
    from verl.protocol import DataProtoFuture

    return isinstance(value, Future | DataProtoFuture) or _is_object_ref(value)


def resolve(value: Any) -> Any:
    """Wait for ``value`` if it is a future (or a list/tuple made only of futures) and return the result(s).

    Anything else is returned unchanged. A list of Ray refs is fetched with one ``ray.get`` call.
    """
    from verl.protocol import DataProtoFuture

    if isinstance(value, DataProtoFuture):
        return value.get()
    if isinstance(value, Future):
        return value.result()
    if _is_object_ref(value):
        return sys.modules["ray"].get(value)
    if isinstance(value, list | tuple) and value and all(is_future(v) for v in value):
        if all(_is_object_ref(v) for v in value):
            return list(sys.modules["ray"].get(list(value)))
        return [resolve(v) for v in value]
    return value


def resolve_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``resolve`` applied to every positional and keyword argument."""
    return tuple(resolve(a) for a in args), {k: resolve(v) for k, v in kwargs.items()}


def completed_future(result: Any = None, error: BaseException | None = None) -> Future:
    """A ``concurrent.futures.Future`` that is already done (the local backend's non-blocking result)."""
    fut: Future = Future()
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
    return fut
