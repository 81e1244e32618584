"""``WorkerGroup``: the driver-side handle on N workers, with every registered worker method bound onto it.

Backends implement two primitives - start a method on one rank (returning a future) and wait for futures - and
inherit the rest: the binding of ``@register``'ed methods, the dispatch -> execute -> collect path, the
``execute_*`` helpers and ``spawn`` for colocated roles. Both backends therefore share one code path.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from verl.single_controller.base.decorator import (
    PADDING_SIZE_KEY,
    Execute,
    MethodSpec,
    get_dispatch_fns,
    registered_methods,
)
from verl.single_controller.base.futures import resolve_args

# Class attribute of a colocated worker class (see colocate.py): role name -> the role's user class.
COLOCATED_ROLES_ATTR = "__verl_colocated_roles__"


@dataclass(frozen=True)
class GroupInfo:
    """What a collect function may read about its group when it runs later, inside ``DataProtoFuture.get``.

    A snapshot instead of the group itself keeps futures small and picklable (they may travel to workers).
    """

    world_size: int
    auto_padding: bool
    # mesh name -> per-rank collect flags of N-D dispatch (make_nd_compute_dataproto_dispatch_fn)
    collect_info: dict[str, list[bool]] = field(default_factory=dict)


class ClassWithInitArgs:
    """A worker class plus the arguments to construct it with, so a group can build one instance per rank."""

    def __init__(self, cls: type, *args: Any, **kwargs: Any) -> None:
        if not isinstance(cls, type) and not hasattr(cls, "__ray_actor_class__"):
            raise TypeError(f"ClassWithInitArgs needs a class, got {type(cls).__name__}: {cls!r}")
        self.cls = cls
        self.args = args
        self.kwargs = kwargs

    @property
    def user_cls(self) -> type:
        """The plain Python class (unwrapping a ``ray.remote`` actor class)."""
        return getattr(self.cls, "__ray_actor_class__", self.cls)

    def __call__(self) -> Any:
        """Construct one instance in the current process."""
        return self.user_cls(*self.args, **self.kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.user_cls.__name__}, args={self.args!r}, kwargs={self.kwargs!r})"


class WorkerGroup(abc.ABC):
    """N workers of one class seen from the driver as one object.

    Each ``@register``'ed method ``m`` of the worker class becomes ``group.m(*args, **kwargs)``: the arguments are
    split per rank by the method's dispatch mode, the method runs on the ranks chosen by its execute mode and the
    outputs are merged by the mode's collect function. ``auto_padding=True`` lets DataProto dispatch pad batches
    that do not divide by ``world_size`` (and strip the padding from the result).
    """

    def __init__(self, world_size: int, auto_padding: bool = False) -> None:
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive int, got {world_size!r}")
        self._world_size = world_size
        self.auto_padding = bool(auto_padding)
        self._bound_methods: dict[str, str] = {}

    # ---- backend primitives --------------------------------------------------------------------------------
    @abc.abstractmethod
    def _call_rank_async(self, rank: int, method_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Start ``method_name(*args, **kwargs)`` on ``rank``; return a future of its result."""

    @abc.abstractmethod
    def _wait(self, futures: list[Any]) -> list[Any]:
        """Block until every future is done; return the results in order (re-raising a worker's error)."""

    # ---- public API ----------------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        """Number of ranks (workers) in the group."""
        return self._world_size

    @property
    def method_names(self) -> list[str]:
        """Names of the registered worker methods bound onto this group."""
        return sorted(self._bound_methods)

    def execute_all_async(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Start ``method_name`` on every rank; return one future per rank.

        When every argument is a list of ``world_size`` entries, rank ``r`` gets entry ``r`` of each; otherwise all
        ranks get the same arguments (verl's convention).
        """
        values = list(args) + list(kwargs.values())
        n = self._world_size
        if values and all(isinstance(v, list | tuple) and len(v) == n for v in values):
            per_rank = [(tuple(a[r] for a in args), {k: v[r] for k, v in kwargs.items()}) for r in range(n)]
        else:
            per_rank = [(args, kwargs)] * n
        return [self._call_rank_async(r, method_name, a, k) for r, (a, k) in enumerate(per_rank)]

    def execute_all_sync(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``execute_all_async`` and wait: the per-rank results as a list."""
        return self._wait(self.execute_all_async(method_name, *args, **kwargs))

    def execute_all(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Alias of ``execute_all_async`` (verl's naming)."""
        return self.execute_all_async(method_name, *args, **kwargs)

    def execute_rank_zero_async(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Start ``method_name`` on rank 0 only; return its future."""
        return self._call_rank_async(0, method_name, args, kwargs)

    def execute_rank_zero_sync(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``method_name`` on rank 0 only and return its result."""
        return self._wait([self.execute_rank_zero_async(method_name, *args, **kwargs)])[0]

    def execute_rank_zero(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Alias of ``execute_rank_zero_async`` (verl's naming)."""
        return self.execute_rank_zero_async(method_name, *args, **kwargs)

    def spawn(self, prefix_set: Iterable[str]) -> dict[str, WorkerGroup]:
        """One group per colocated role, sharing this group's workers: ``groups["critic"].compute_values(x)``.

        Only valid when the worker class was built by ``create_colocated_worker_cls``; the role groups call the
        ``<role>_<method>`` methods of the shared workers.
        """
        roles: dict[str, type] = getattr(self._worker_user_cls(), COLOCATED_ROLES_ATTR, {})
        groups: dict[str, WorkerGroup] = {}
        for prefix in prefix_set:
            if prefix not in roles:
                raise ValueError(
                    f"role {prefix!r} is not colocated in this worker group; its roles are {sorted(roles)}"
                )
            view = self._view()
            view._bind_worker_methods(roles[prefix], remote_prefix=f"{prefix}_")
            view.role = prefix  # named in error messages (a dead worker: "worker 'critic' rank 1 ...")
            groups[prefix] = view
        return groups

    # ---- binding ---------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def _worker_user_cls(self) -> type:
        """The plain Python class the workers are instances of."""

    def _view(self) -> WorkerGroup:
        """A copy of this group sharing its workers but with no registered methods bound."""
        view = object.__new__(type(self))
        view.__dict__.update({k: v for k, v in self.__dict__.items() if k not in self._bound_methods})
        view._bound_methods = {}
        return view

    def _bind_worker_methods(self, user_cls: type, remote_prefix: str = "") -> None:
        """Bind ``group.<name>`` for every registered method of ``user_cls``; it calls ``<remote_prefix><name>``."""
        for name, spec in registered_methods(user_cls).items():
            if hasattr(type(self), name) or name in self.__dict__:
                raise ValueError(
                    f"{user_cls.__name__}.{name} is registered but {type(self).__name__} already has an attribute "
                    f"{name!r}; rename the worker method"
                )
            remote_name = f"{remote_prefix}{name}"
            setattr(self, name, self._make_group_method(name, remote_name, spec))
            self._bound_methods[name] = remote_name

    def _make_group_method(self, name: str, remote_name: str, spec: MethodSpec) -> Callable[..., Any]:
        fns = get_dispatch_fns(spec.dispatch_mode)

        def group_method(*args: Any, **kwargs: Any) -> Any:
            if spec.materialize_futures:
                args, kwargs = resolve_args(args, kwargs)
            per_rank_args, per_rank_kwargs = fns.dispatch_fn(self, *args, **kwargs)
            collect_extra: dict[str, Any] = {}
            if PADDING_SIZE_KEY in per_rank_kwargs:
                collect_extra["padding_size"] = per_rank_kwargs.pop(PADDING_SIZE_KEY)
            self._check_dispatched(name, per_rank_args, per_rank_kwargs)

            if spec.execute_mode is Execute.RANK_ZERO:
                future = self._call_rank_async(
                    0, remote_name, tuple(a[0] for a in per_rank_args), {k: v[0] for k, v in per_rank_kwargs.items()}
                )
                return self._wait([future])[0] if spec.blocking else future

            futures = [
                self._call_rank_async(
                    r, remote_name, tuple(a[r] for a in per_rank_args), {k: v[r] for k, v in per_rank_kwargs.items()}
                )
                for r in range(self._world_size)
            ]
            if spec.blocking:
                return fns.collect_fn(self, self._wait(futures), **collect_extra)
            if fns.returns_proto:
                from verl.protocol import DataProtoFuture

                info = GroupInfo(self._world_size, self.auto_padding, dict(self.__dict__.get("_collect_info", {})))
                return DataProtoFuture(
                    collect_fn=functools.partial(fns.collect_fn, info, **collect_extra), futures=futures
                )
            return futures

        group_method.__name__ = name
        group_method.__qualname__ = f"{type(self).__name__}.{name}"
        group_method.__doc__ = f"Group call of the worker method {remote_name!r} ({spec})."
        return group_method

    def _check_dispatched(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        n = self._world_size
        for label, value in [(f"positional argument {i}", a) for i, a in enumerate(args)] + [
            (f"keyword argument {k!r}", v) for k, v in kwargs.items()
        ]:
            if not isinstance(value, list | tuple) or len(value) != n:
                raise ValueError(
                    f"the dispatch function of {name!r} must return one entry per rank (world_size={n}) for every "
                    f"argument; {label} has {len(value) if hasattr(value, '__len__') else 'no length'}"
                )
