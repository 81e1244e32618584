"""How a registered worker method is split across ranks (dispatch), run (execute) and merged (collect).

A worker method marked ``@register(dispatch_mode=Dispatch.X)`` becomes, on a ``WorkerGroup``, a driver-side method
that (1) turns the caller's arguments into one argument set per rank with the mode's ``dispatch_fn``, (2) runs
the method on every rank (``Execute.ALL``) or on rank 0 only (``Execute.RANK_ZERO``) and (3) merges the per-rank
outputs with the mode's ``collect_fn``. This is the single-controller pattern of HybridFlow (Sheng et al., 2024,
"HybridFlow: A Flexible and Efficient RLHF Framework", arXiv:2409.19256).

Contract of the functions in the registry (also for modes users add with ``register_dispatch_mode``):

- ``dispatch_fn(worker_group, *args, **kwargs) -> (args, kwargs)``: every returned positional argument and every
  keyword value is a list with one entry per rank (``len == worker_group.world_size``). A dispatch function may
  add the integer keyword ``PADDING_SIZE_KEY``; the group strips it before calling the workers and hands it to
  the collect function as ``padding_size=``.
- ``collect_fn(worker_group, outputs: list) -> Any``: ``outputs[r]`` is what rank ``r`` returned. For a
  non-blocking call the collect runs later, in ``DataProtoFuture.get``, and receives a ``GroupInfo`` snapshot
  (``world_size``, ``auto_padding``) instead of the group.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto

# meta_info flag (verl's name) that lets one batch opt into padding when it does not divide by the world size.
AUTO_PADDING_KEY = "_verl_auto_padding"
# Keyword a dispatch function uses to tell its collect function how many rows were padded; never sent to workers.
PADDING_SIZE_KEY = "_verl_padding_size"
# Attribute that @register stores on the function; WorkerGroup looks for it when binding methods.
MAGIC_ATTR = "__verl_register__"


@dataclass(frozen=True)
class DispatchMode:
    """A named dispatch mode; equality is by name so modes survive pickling into worker processes."""

    name: str

    def __repr__(self) -> str:
        return f"Dispatch.{self.name}"


class Dispatch:
    """The dispatch modes (verl's names). ``register_dispatch_mode`` adds new ones as attributes of this class.

    - ``ONE_TO_ALL``: every rank gets the same arguments; output is the list of per-rank outputs.
    - ``ALL_TO_ALL``: every argument is a list with one entry per rank; rank ``r`` gets entry ``r``; list out.
    - ``RANK_ZERO``: the arguments go to rank 0 alone, which is the only rank that runs; its output is returned.
    - ``DP_COMPUTE``: as ``ALL_TO_ALL`` (per-rank lists in, list out), named for data-parallel work.
    - ``DP_COMPUTE_PROTO``: every ``DataProto`` argument is chunked into ``world_size`` equal parts (rank ``r``
      gets chunk ``r``; other arguments are broadcast); outputs are merged with ``DataProto.concat``.
    - ``DP_COMPUTE_PROTO_WITH_FUNC``: the first argument is a function sent to every rank, the rest as
      ``DP_COMPUTE_PROTO``.
    - ``DP_COMPUTE_METRIC``: chunked in as ``DP_COMPUTE_PROTO``, list of per-rank outputs out (e.g. metrics).
    """

    ONE_TO_ALL = DispatchMode("ONE_TO_ALL")
    ALL_TO_ALL = DispatchMode("ALL_TO_ALL")
    RANK_ZERO = DispatchMode("RANK_ZERO")
    DP_COMPUTE = DispatchMode("DP_COMPUTE")
    DP_COMPUTE_PROTO = DispatchMode("DP_COMPUTE_PROTO")
    DP_COMPUTE_PROTO_WITH_FUNC = DispatchMode("DP_COMPUTE_PROTO_WITH_FUNC")
    DP_COMPUTE_METRIC = DispatchMode("DP_COMPUTE_METRIC")

    @classmethod
    def remove(cls, name: str) -> None:
        """Remove a mode added with :func:`register_dispatch_mode` (verl's ``Dispatch.remove``); the built-in modes
        stay (ValueError), an unknown name is a KeyError."""
        if name in _BUILTIN_MODES:
            raise ValueError(f"Dispatch.{name} is a built-in dispatch mode and cannot be removed")
        mode = getattr(cls, name, None)
        if not isinstance(mode, DispatchMode):
            raise KeyError(f"no dispatch mode named {name!r}")
        delattr(cls, name)
        _REGISTRY.pop(mode, None)


class Execute(enum.Enum):
    """Which ranks run a registered method: all of them, or rank 0 only."""

    ALL = "ALL"
    RANK_ZERO = "RANK_ZERO"


@dataclass(frozen=True)
class DispatchFns:
    """The pair of functions that implement one dispatch mode."""

    dispatch_fn: Callable[..., tuple[tuple[Any, ...], dict[str, Any]]]
    collect_fn: Callable[..., Any]
    # True when the merged output is a DataProto, so a non-blocking call can hand back a DataProtoFuture.
    returns_proto: bool = False

    def __getitem__(self, key: str) -> Any:
        """verl's dict view of a registry entry: ``fns["dispatch_fn"]``, ``fns["collect_fn"]``."""
        if key not in ("dispatch_fn", "collect_fn", "returns_proto"):
            raise KeyError(key)
        return getattr(self, key)


@dataclass(frozen=True)
class MethodSpec:
    """What ``@register`` recorded about one worker method."""

    dispatch_mode: DispatchMode | DispatchFns
    execute_mode: Execute
    blocking: bool
    materialize_futures: bool


def _world_size(worker_group: Any) -> int:
    return int(worker_group.world_size)


def dispatch_one_to_all(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Replicate every argument ``world_size`` times."""
    n = _world_size(worker_group)
    return tuple([a] * n for a in args), {k: [v] * n for k, v in kwargs.items()}


def dispatch_all_to_all(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Pass per-rank lists through after checking each has exactly ``world_size`` entries."""
    n = _world_size(worker_group)
    named = [(f"positional argument {i}", a) for i, a in enumerate(args)] + [
        (f"keyword argument {k!r}", v) for k, v in kwargs.items()
    ]
    for label, value in named:
        if not isinstance(value, list | tuple) or len(value) != n:
            got = f"a {type(value).__name__} of length {len(value)}" if hasattr(value, "__len__") else repr(value)
            raise ValueError(
                f"this dispatch mode needs every argument to be a list with one entry per rank "
                f"(world_size={n}); {label} is {got}"
            )
    return tuple(list(a) for a in args), {k: list(v) for k, v in kwargs.items()}


def collect_all_to_all(worker_group: Any, outputs: list[Any]) -> list[Any]:
    """Return the per-rank outputs as a list (``outputs[r]`` from rank ``r``)."""
    return list(outputs)


def collect_rank_zero(worker_group: Any, outputs: list[Any]) -> Any:
    """Return rank 0's output."""
    return outputs[0]


def _padding_enabled(worker_group: Any, protos: list[DataProto]) -> bool:
    from verl.protocol import DataProtoConfig

    if bool(getattr(worker_group, "auto_padding", False)) or DataProtoConfig.auto_padding:
        return True
    return any(bool(p.meta_info.get(AUTO_PADDING_KEY, False)) for p in protos)


def _chunk_protos(worker_group: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict]:
    """Split every DataProto argument into ``world_size`` chunks (padding first when enabled), broadcast the rest.

    All DataProto arguments must have the same number of rows ``B``. When ``B % world_size != 0`` and padding is
    enabled, each is padded to ``ceil(B / world_size) * world_size`` rows by ``pad_dataproto_to_divisor`` and the
    pad size is returned under ``PADDING_SIZE_KEY`` for the collect function to strip.
    """
    from verl.protocol import DataProtoFuture

    n = _world_size(worker_group)
    items = [(f"positional argument {i}", a) for i, a in enumerate(args)] + [
        (f"keyword argument {k!r}", v) for k, v in kwargs.items()
    ]
    protos = [(label, v) for label, v in items if isinstance(v, DataProto)]
    lengths = {label: len(v) for label, v in protos}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"all DataProto arguments must have the same number of rows to be chunked; got {lengths}")
    padding_size = 0
    if protos:
        rows = next(iter(lengths.values()))
        if rows % n != 0:
            if not _padding_enabled(worker_group, [v for _, v in protos]):
                raise ValueError(
                    f"cannot split a batch of {rows} rows evenly over {n} ranks ({rows} % {n} = {rows % n}); "
                    f"make the batch size a multiple of {n}, or enable auto-padding with "
                    f"data.meta_info[{AUTO_PADDING_KEY!r}] = True or worker_group.auto_padding = True, which pads "
                    f"to {-(-rows // n) * n} rows and strips the padding from the result"
                )
            padding_size = (-rows) % n

    def split(value: Any) -> list[Any]:
        if isinstance(value, DataProto):
            if padding_size:
                value, _ = pad_dataproto_to_divisor(value, n)
            chunks = value.chunk(n)
            if len(chunks) != n:
                raise ValueError(f"DataProto.chunk({n}) returned {len(chunks)} chunks for {len(value)} rows")
            return list(chunks)
        if isinstance(value, DataProtoFuture):
            # Only reached with materialize_futures=False: each rank receives a future of its chunk.
            return list(value.chunk(n))
        return [value] * n

    out_args = tuple(split(a) for a in args)
    out_kwargs = {k: split(v) for k, v in kwargs.items()}
    if padding_size:
        out_kwargs[PADDING_SIZE_KEY] = padding_size
    return out_args, out_kwargs


def dispatch_dp_compute_data_proto(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Chunk DataProto arguments per rank (see ``_chunk_protos``); other arguments are broadcast."""
    return _chunk_protos(worker_group, args, kwargs)


def dispatch_dp_compute_data_proto_with_func(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Broadcast the first argument (a function) to every rank and chunk the DataProto arguments after it."""
    if not args or not callable(args[0]):
        raise ValueError(
            "DP_COMPUTE_PROTO_WITH_FUNC needs a function as the first positional argument, got "
            f"{type(args[0]).__name__ if args else 'no positional arguments'}"
        )
    n = _world_size(worker_group)
    rest_args, rest_kwargs = _chunk_protos(worker_group, args[1:], kwargs)
    return ([args[0]] * n, *rest_args), rest_kwargs


def collect_dp_compute_data_proto(worker_group: Any, outputs: list[Any], padding_size: int = 0) -> DataProto:
    """``DataProto.concat`` of the per-rank outputs, minus the last ``padding_size`` padded rows."""
    for rank, out in enumerate(outputs):
        if not isinstance(out, DataProto):
            raise TypeError(
                f"a DP_COMPUTE_PROTO method must return a DataProto on every rank; rank {rank} returned "
                f"{type(out).__name__}"
            )
    merged = DataProto.concat(list(outputs))
    if padding_size:
        merged = unpad_dataproto(merged, padding_size)
    return merged


def collect_dp_compute_metric(worker_group: Any, outputs: list[Any], padding_size: int = 0) -> list[Any]:
    """The per-rank outputs as a list (padding, if any, stays inside each rank's metrics)."""
    return list(outputs)


# ---- N-D meshes (verl's make_nd_compute_dataproto_dispatch_fn) ------------------------------------------------------
# A worker states its place in a named device mesh with ``Worker._register_dispatch_collect_info(mesh_name, dp_rank,
# is_collect)``: several ranks may share one data-parallel rank (tensor / sequence / pipeline parallel peers), which
# then all receive the same chunk, and only the ranks marked ``is_collect`` contribute to the output.


def _split_protos(worker_group: Any, n: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict, int]:
    """Every DataProto / TensorDict argument in ``n`` chunks (a DataProto padded first when enabled), the rest
    repeated ``n`` times, and the number of padded rows."""
    from tensordict import TensorDict

    from verl.utils.tensordict_utils import index_select_tensor_dict

    protos = [v for v in list(args) + list(kwargs.values()) if isinstance(v, DataProto | TensorDict)]
    lengths = {len(p) for p in protos}
    if len(lengths) > 1:
        raise ValueError(f"all DataProto arguments must have the same number of rows to be chunked; got {lengths}")
    padding_size = 0
    if protos:
        rows = lengths.pop()
        if rows % n and any(isinstance(p, TensorDict) for p in protos):
            raise ValueError(
                f"cannot split a TensorDict of {rows} rows evenly over {n} data-parallel ranks (TensorDicts are not "
                f"padded); make the batch size a multiple of {n}"
            )
        if rows % n:
            if not _padding_enabled(worker_group, protos):
                raise ValueError(
                    f"cannot split a batch of {rows} rows evenly over {n} data-parallel ranks; make the batch size "
                    f"a multiple of {n} or enable auto-padding (data.meta_info[{AUTO_PADDING_KEY!r}] = True)"
                )
            padding_size = (-rows) % n

    def split(value: Any) -> list[Any]:
        if isinstance(value, DataProto):
            if padding_size:
                value, _ = pad_dataproto_to_divisor(value, n)
            return list(value.chunk(n))
        if isinstance(value, TensorDict):  # row blocks; nested (jagged) tensors re-packed per block
            k = len(value) // n
            return [index_select_tensor_dict(value, list(range(i * k, (i + 1) * k))) for i in range(n)]
        return [value] * n

    return tuple(split(a) for a in args), {k: split(v) for k, v in kwargs.items()}, padding_size


def dispatch_nd_compute(
    dp_rank_mapping: list[int], dp_size: int, worker_group: Any, *args: Any, **kwargs: Any
) -> tuple[tuple, dict]:
    """Arguments already split per data-parallel rank (lists of ``dp_size``) -> one entry per worker rank:
    rank ``r`` gets entry ``dp_rank_mapping[r]``."""
    for label, value in [(f"positional argument {i}", a) for i, a in enumerate(args)] + list(kwargs.items()):
        if not isinstance(value, list | tuple) or len(value) != dp_size:
            raise ValueError(f"{label} must be a list of {dp_size} entries (one per data-parallel rank)")
    out_args = tuple([a[d] for d in dp_rank_mapping] for a in args)
    out_kwargs = {k: [v[d] for d in dp_rank_mapping] for k, v in kwargs.items()}
    return out_args, out_kwargs


def collect_nd_compute(collect_mask: list[bool], worker_group: Any, output: list[Any]) -> list[Any]:
    """The outputs of the ranks whose ``collect_mask`` entry is True, in rank order."""
    if len(output) != len(collect_mask):
        raise ValueError(f"got {len(output)} outputs for a collect mask of {len(collect_mask)} ranks")
    return [o for o, keep in zip(output, collect_mask) if keep]


def dispatch_nd_compute_dataproto(
    dp_rank_mapping: list[int], dp_size: int, worker_group: Any, *args: Any, **kwargs: Any
) -> tuple[tuple, dict]:
    """Chunk DataProto arguments into ``dp_size`` parts and give rank ``r`` part ``dp_rank_mapping[r]``."""
    split_args, split_kwargs, padding_size = _split_protos(worker_group, dp_size, args, kwargs)
    out_args, out_kwargs = dispatch_nd_compute(dp_rank_mapping, dp_size, worker_group, *split_args, **split_kwargs)
    if padding_size:
        out_kwargs[PADDING_SIZE_KEY] = padding_size
    return out_args, out_kwargs


def collect_nd_compute_dataproto(
    collect_mask: list[bool], worker_group: Any, output: list[Any], padding_size: int = 0
) -> DataProto:
    """``DataProto.concat`` of the collected ranks' outputs, minus ``padding_size`` padded rows; TensorDict outputs
    (from TensorDict inputs) are concatenated with ``tensordict_utils.concat_tensordict``."""
    from tensordict import TensorDict

    kept = collect_nd_compute(collect_mask, worker_group, output)
    if kept and all(isinstance(out, TensorDict) for out in kept):
        from verl.utils.tensordict_utils import concat_tensordict

        return concat_tensordict(kept)
    for out in kept:
        if not isinstance(out, DataProto):
            raise TypeError(f"an N-D DataProto method must return a DataProto on collected ranks, got {type(out)}")
    merged = DataProto.concat(kept)
    return unpad_dataproto(merged, padding_size) if padding_size else merged


def _mesh_info(worker_group: Any, mesh_name: str) -> tuple[list[int], list[bool]]:
    """``(dp_rank per worker rank, collect flag per worker rank)`` of ``mesh_name``, asked of the workers once and
    cached on the group."""
    dispatch_info = worker_group.__dict__.setdefault("_dispatch_info", {})
    collect_info = worker_group.__dict__.setdefault("_collect_info", {})
    if mesh_name not in dispatch_info:
        ranks = list(worker_group._query_dispatch_info(mesh_name))
        flags = [bool(f) for f in worker_group._query_collect_info(mesh_name)]
        n = _world_size(worker_group)
        if len(ranks) != n or len(flags) != n:
            raise ValueError(f"mesh {mesh_name!r}: expected {n} entries, got {len(ranks)} dp ranks, {len(flags)} flags")
        if sorted(set(ranks)) != list(range(max(ranks) + 1)):
            raise ValueError(f"mesh {mesh_name!r}: data-parallel ranks must cover 0..dp_size-1, got {ranks}")
        dispatch_info[mesh_name], collect_info[mesh_name] = ranks, flags
    return dispatch_info[mesh_name], collect_info[mesh_name]


def dispatch_lazy_compute_data_proto(mesh_name: str, worker_group: Any, *args: Any, **kwargs: Any) -> tuple:
    """``dispatch_nd_compute_dataproto`` with the mesh layout the workers registered under ``mesh_name``."""
    ranks, _ = _mesh_info(worker_group, mesh_name)
    return dispatch_nd_compute_dataproto(ranks, max(ranks) + 1, worker_group, *args, **kwargs)


def collect_lazy_compute_data_proto(
    mesh_name: str, worker_group: Any, output: list[Any], padding_size: int = 0
) -> DataProto:
    """``collect_nd_compute_dataproto`` with the collect flags of ``mesh_name`` (read from the group, or from the
    snapshot a non-blocking call carries)."""
    collect_info = getattr(worker_group, "collect_info", None) or getattr(worker_group, "_collect_info", {})
    if mesh_name not in collect_info:
        raise ValueError(f"mesh {mesh_name!r} has no collect information; was it dispatched through this group?")
    return collect_nd_compute_dataproto(collect_info[mesh_name], worker_group, output, padding_size)


def make_nd_compute_dataproto_dispatch_fn(mesh_name: str) -> dict[str, Any]:
    """``@register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))``: DataProto arguments
    are split over the data-parallel ranks of the workers' ``mesh_name`` mesh; the result is gathered from the
    ranks registered with ``is_collect=True``."""
    return {
        "dispatch_fn": functools.partial(dispatch_lazy_compute_data_proto, mesh_name),
        "collect_fn": functools.partial(collect_lazy_compute_data_proto, mesh_name),
        "returns_proto": True,
    }


def get_predefined_dispatch_fn(dispatch_mode: DispatchMode | str) -> dict[str, Any]:
    """verl's accessor: ``{"dispatch_fn", "collect_fn"}`` of a predefined dispatch mode."""
    fns = get_dispatch_fns(dispatch_mode)
    return {"dispatch_fn": fns.dispatch_fn, "collect_fn": fns.collect_fn}


_REGISTRY: dict[DispatchMode, DispatchFns] = {
    Dispatch.ONE_TO_ALL: DispatchFns(dispatch_one_to_all, collect_all_to_all),
    Dispatch.ALL_TO_ALL: DispatchFns(dispatch_all_to_all, collect_all_to_all),
    Dispatch.RANK_ZERO: DispatchFns(dispatch_one_to_all, collect_rank_zero),
    Dispatch.DP_COMPUTE: DispatchFns(dispatch_all_to_all, collect_all_to_all),
    Dispatch.DP_COMPUTE_PROTO: DispatchFns(dispatch_dp_compute_data_proto, collect_dp_compute_data_proto, True),
    Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: DispatchFns(
        dispatch_dp_compute_data_proto_with_func, collect_dp_compute_data_proto, True
    ),
    Dispatch.DP_COMPUTE_METRIC: DispatchFns(dispatch_dp_compute_data_proto, collect_dp_compute_metric),
}

DISPATCH_MODE_FN_REGISTRY = _REGISTRY
"""verl's name of the mode -> functions registry (the same dict; an entry reads as ``entry["dispatch_fn"]`` too)."""
_BUILTIN_MODES = frozenset(mode.name for mode in _REGISTRY)


def _check_dispatch_mode(dispatch_mode: DispatchMode | dict[str, Any]) -> None:
    """verl's check of a ``dispatch_mode`` argument: a registered mode, or a dict with ``dispatch_fn`` and
    ``collect_fn``; anything else raises ValueError."""
    if isinstance(dispatch_mode, dict):
        missing = {"dispatch_fn", "collect_fn"} - set(dispatch_mode)
        if missing:
            raise ValueError(f"a dispatch_mode dict needs the keys dispatch_fn and collect_fn; missing {missing}")
        return
    if not isinstance(dispatch_mode, DispatchMode):
        raise ValueError(f"dispatch_mode must be a Dispatch mode or a dict, got {dispatch_mode!r}")
    _as_mode(dispatch_mode)


def _check_fns(dispatch_fn: Callable[..., Any], collect_fn: Callable[..., Any]) -> None:
    for label, fn in (("dispatch_fn", dispatch_fn), ("collect_fn", collect_fn)):
        if not callable(fn):
            raise TypeError(f"{label} must be callable, got {type(fn).__name__}")


def register_dispatch_mode(
    name: str, dispatch_fn: Callable[..., Any], collect_fn: Callable[..., Any], returns_proto: bool = False
) -> DispatchMode:
    """Add a dispatch mode named ``name``; afterwards ``Dispatch.<name>`` is usable in ``@register``.

    ``dispatch_fn(worker_group, *args, **kwargs) -> (args, kwargs)`` with one list entry per rank and
    ``collect_fn(worker_group, outputs) -> result`` (see the module docstring). ``returns_proto=True`` makes
    non-blocking calls return a ``DataProtoFuture`` instead of a list of per-rank futures.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"dispatch mode name must be a Python identifier, got {name!r}")
    if hasattr(Dispatch, name):
        raise ValueError(f"dispatch mode {name!r} already exists; use update_dispatch_mode to change it")
    _check_fns(dispatch_fn, collect_fn)
    mode = DispatchMode(name)
    setattr(Dispatch, name, mode)
    _REGISTRY[mode] = DispatchFns(dispatch_fn, collect_fn, returns_proto)
    return mode


def update_dispatch_mode(
    dispatch_mode: DispatchMode | str,
    dispatch_fn: Callable[..., Any],
    collect_fn: Callable[..., Any],
    returns_proto: bool | None = None,
) -> None:
    """Replace the functions of an existing dispatch mode (built-in or user-registered)."""
    mode = _as_mode(dispatch_mode)
    _check_fns(dispatch_fn, collect_fn)
    keep = _REGISTRY[mode].returns_proto if returns_proto is None else returns_proto
    _REGISTRY[mode] = DispatchFns(dispatch_fn, collect_fn, keep)


def _as_mode(dispatch_mode: DispatchMode | str) -> DispatchMode:
    mode = DispatchMode(dispatch_mode) if isinstance(dispatch_mode, str) else dispatch_mode
    if mode not in _REGISTRY:
        known = ", ".join(m.name for m in _REGISTRY)
        raise ValueError(f"unknown dispatch mode {dispatch_mode!r}; known modes: {known}")
    return mode


def get_dispatch_fns(dispatch_mode: DispatchMode | DispatchFns | str) -> DispatchFns:
    """The dispatch/collect functions of a mode (a ``Dispatch`` member, its name, or an explicit ``DispatchFns``)."""
    if isinstance(dispatch_mode, DispatchFns):
        return dispatch_mode
    return _REGISTRY[_as_mode(dispatch_mode)]


def register(
    dispatch_mode: DispatchMode | DispatchFns | dict[str, Callable[..., Any]] | str = Dispatch.ALL_TO_ALL,
    execute_mode: Execute | None = None,
    blocking: bool = True,
    materialize_futures: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a worker method for binding onto a ``WorkerGroup``.

    ``dispatch_mode`` is a ``Dispatch`` member, the name of one, or ``{"dispatch_fn": f, "collect_fn": g}`` (with an
    optional ``"returns_proto": True`` so non-blocking calls return a ``DataProtoFuture``).
    ``execute_mode`` defaults to ``Execute.RANK_ZERO`` for ``Dispatch.RANK_ZERO`` and ``Execute.ALL`` otherwise.
    ``blocking=False`` makes the group method return futures (a ``DataProtoFuture`` for DataProto modes).
    ``materialize_futures=True`` resolves futures among the arguments in the driver before dispatching.
    The decorated function itself is unchanged apart from the recorded ``MethodSpec``.
    """
    if isinstance(dispatch_mode, dict):
        missing = {"dispatch_fn", "collect_fn"} - set(dispatch_mode)
        if missing:
            raise ValueError(f"a dispatch_mode dict needs the keys dispatch_fn and collect_fn; missing {missing}")
        _check_fns(dispatch_mode["dispatch_fn"], dispatch_mode["collect_fn"])
        mode: DispatchMode | DispatchFns = DispatchFns(
            dispatch_mode["dispatch_fn"], dispatch_mode["collect_fn"], bool(dispatch_mode.get("returns_proto", False))
        )
    elif isinstance(dispatch_mode, DispatchFns):
        mode = dispatch_mode
    else:
        mode = _as_mode(dispatch_mode)
    if execute_mode is None:
        execute_mode = Execute.RANK_ZERO if mode == Dispatch.RANK_ZERO else Execute.ALL
    if not isinstance(execute_mode, Execute):
        raise ValueError(f"execute_mode must be Execute.ALL or Execute.RANK_ZERO, got {execute_mode!r}")
    spec = MethodSpec(mode, execute_mode, bool(blocking), bool(materialize_futures))

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        if not inspect.isfunction(func):
            raise TypeError(f"@register decorates plain functions (worker methods), got {type(func).__name__}")
        setattr(func, MAGIC_ATTR, spec)
        return func

    return decorator


def registered_methods(cls: type) -> dict[str, MethodSpec]:
    """Name -> ``MethodSpec`` of every ``@register``'ed method of ``cls`` (including inherited ones)."""
    found: dict[str, MethodSpec] = {}
    for name in dir(cls):
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        if isinstance(attr, staticmethod | classmethod):
            attr = attr.__func__
        spec = getattr(attr, MAGIC_ATTR, None)
        if isinstance(spec, MethodSpec):
            found[name] = spec
    return found
