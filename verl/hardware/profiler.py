"""Profiling and debug dumps of training steps (``trainer.enable_profiling`` / ``trainer.enable_debug_mode``).

- :class:`StepProfiler`: ``with profiler.step(global_step):`` records a ``torch.profiler`` trace of the configured
  steps and writes it as a Chrome trace (open in ``chrome://tracing`` or https://ui.perfetto.dev);
- :func:`dump_step_debug`: one JSON file per step with the step's metrics and the shape, dtype and statistics of
  every tensor of the batch (verbose per-step dumps of debug mode).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from verl.sections.profiler import ProfilerConfig  # upstream's verl.utils.profiler.ProfilerConfig (role profiler)
from verl.utils.fs import atomic_write_text, makedirs

__all__ = [
    "ProfilerConfig",
    "StepProfiler",
    "dump_step_debug",
    "marked_timer",
    "mark_worker_range",
    "simple_timer",
    "run_worker_finish_hook",
    "start_worker_trace",
    "stop_worker_trace",
    "tensor_summary",
]


@contextlib.contextmanager
def simple_timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    """Add the wall time of the ``with`` body to ``timing_raw[name]`` (seconds), also when the body raises."""
    import time

    start = time.perf_counter()
    try:
        yield
    finally:
        timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - start


@contextlib.contextmanager
def marked_timer(
    name: str, timing_raw: dict[str, float], color: str | None = None, domain: str | None = None, **kwargs: Any
) -> Iterator[None]:
    """:func:`simple_timer` under verl's name; ``color``, ``domain`` and other keywords style verl's NVTX ranges and
    are accepted and ignored here (no NVTX annotations are emitted)."""
    with simple_timer(name, timing_raw):
        yield


class StepProfiler:
    """Trace selected training steps with ``torch.profiler``.

    Args:
        enabled: master switch (``trainer.enable_profiling``); when off, :meth:`step` costs nothing.
        steps: the global steps to trace (``trainer.profile_steps``); empty means every step.
        out_dir: where ``step_<N>.json`` Chrome traces are written.
        record_shapes / profile_memory / with_stack: passed to ``torch.profiler.profile``.

    Example::

        profiler = StepProfiler(True, [2, 3], "outputs/profile")
        with profiler.step(2):
            train_step()
        profiler.traces  # ["outputs/profile/step_2.json"]
    """

    def __init__(
        self,
        enabled: bool,
        steps: Iterable[int] = (),
        out_dir: str = "profile",
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = False,
    ) -> None:
        self.enabled = bool(enabled)
        try:
            self.steps = frozenset(int(s) for s in (steps or ()))
        except (TypeError, ValueError) as e:
            raise ValueError(f"profile steps must be integers, got {steps!r}") from e
        self.out_dir = out_dir
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.traces: list[str] = []

    @classmethod
    def from_config(cls, trainer_config: Any, out_dir: str) -> StepProfiler:
        """Build from the ``trainer`` section (``enable_profiling``, ``profile_steps``)."""
        get = trainer_config.get if hasattr(trainer_config, "get") else lambda k, d=None: getattr(trainer_config, k, d)
        return cls(bool(get("enable_profiling", False)), list(get("profile_steps", None) or []), out_dir)

    def should_profile(self, step: int) -> bool:
        """Whether ``step`` is traced."""
        return self.enabled and (not self.steps or int(step) in self.steps)

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Trace the body when ``step`` is selected; the trace is written even if the body raises."""
        if not self.should_profile(step):
            yield
            return
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        prof = profile(
            activities=activities,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
        )
        prof.__enter__()
        try:
            yield
        finally:
            prof.__exit__(None, None, None)
            makedirs(self.out_dir)
            path = os.path.join(self.out_dir, f"step_{int(step)}.json")
            # export to a temp name then rename, so a reader never sees a half-written trace
            tmp = f"{path}.tmp-{os.getpid()}"
            prof.export_chrome_trace(tmp)
            os.replace(tmp, path)
            self.traces.append(path)


# The trace a worker process opened for its role (upstream v0.9's per-role profiler): (handle, spec, rank); the
# handle is the torch.profiler object (tool torch) or None (nsys, torch_memory: their state lives in CUDA).
_WORKER_TRACE: tuple[Any, dict[str, Any], int] | None = None


def start_worker_trace(rank: int, spec: Mapping[str, Any]) -> bool:
    """Open this worker process's trace of one traced step (or stage, or run of steps) of a role.

    ``spec`` (built by :mod:`verl.trainer.ppo.role_profiler`): ``tool`` (``torch``, ``nsys``, ``torch_memory``),
    ``role``, ``step``, ``through`` (the last step of a continuous run; None: ``step`` alone), ``stage`` (None: the
    whole step), ``ranks`` (None: all), ``contents`` (torch: cpu, cuda, memory, shapes, stack; empty: cpu and cuda
    when present), ``memory`` (torch_memory's options), ``save_path``, ``relocate_results``. ``nsys`` opens a
    capture range with an NVTX range, ``torch_memory`` starts recording the allocator
    (:mod:`verl.hardware.cuda_profile`). Returns whether a trace was opened: not when ``rank`` is not traced, nor
    when one is already open in this process (colocated roles, or the local backend where every rank and the driver
    share one process: that trace already holds this work).
    """
    global _WORKER_TRACE
    ranks = spec["ranks"]
    if (ranks is not None and rank not in ranks) or _WORKER_TRACE is not None:
        return False
    if spec["tool"] in ("nsys", "torch_memory"):
        from verl.hardware import cuda_profile

        (cuda_profile.nsys_start if spec["tool"] == "nsys" else cuda_profile.memory_start)(spec)
        _WORKER_TRACE = (None, dict(spec), int(rank))
        return True
    if torch.autograd._profiler_enabled():
        return False
    from torch.profiler import ProfilerActivity, profile

    contents = set(spec["contents"])
    activities = []
    if not contents or "cpu" in contents:
        activities.append(ProfilerActivity.CPU)
    if torch.cuda.is_available() and (not contents or "cuda" in contents):
        activities.append(ProfilerActivity.CUDA)
    prof = profile(
        activities=activities or [ProfilerActivity.CPU],
        record_shapes="shapes" in contents,
        profile_memory="memory" in contents,
        with_stack="stack" in contents,
    )
    prof.__enter__()
    _WORKER_TRACE = (prof, dict(spec), int(rank))
    return True


def worker_trace_path(spec: Mapping[str, Any], rank: int, ext: str = "json") -> str:
    """Where a role's trace goes: ``<save_path>/<role>/step<N>[-<M>][_<stage>]_rank<R>.<ext>`` (``-<M>``: the last
    step of a continuous run), or with ``relocate_results`` every trace flat in ``<save_path>`` as
    ``<role>_step<N>...``."""
    stage = f"_{spec['stage']}" if spec["stage"] else ""
    through = f"-{int(spec['through'])}" if spec["through"] not in (None, spec["step"]) else ""
    name = f"step{int(spec['step'])}{through}{stage}_rank{int(rank)}.{ext}"
    if spec["relocate_results"]:
        return os.path.join(spec["save_path"], f"{spec['role']}_{name}")
    return os.path.join(spec["save_path"], str(spec["role"]), name)


def stop_worker_trace(rank: int) -> str | None:
    """Close the trace :func:`start_worker_trace` opened for ``rank`` in this process and write it: a Chrome trace
    (torch), a memory snapshot pickle (torch_memory), both under a temporary name then renamed; nsys closes the
    capture range (Ray's Nsight writes the report; with ``relocate_results`` this process's finished reports are
    moved into ``save_path``). Returns the written path (None when this rank opened none, and for nsys)."""
    global _WORKER_TRACE
    if _WORKER_TRACE is None or _WORKER_TRACE[2] != int(rank):
        return None
    prof, spec, _ = _WORKER_TRACE
    _WORKER_TRACE = None
    if spec["tool"] in ("nsys", "torch_memory"):
        from verl.hardware import cuda_profile

        if spec["tool"] == "torch_memory":
            return cuda_profile.memory_stop(worker_trace_path(spec, rank, "pickle"))
        cuda_profile.nsys_stop()
        if spec["relocate_results"]:
            cuda_profile.relocate_nsys_reports(spec, os.getpid())
        return None
    prof.__exit__(None, None, None)
    path = worker_trace_path(spec, rank)
    makedirs(os.path.dirname(path))
    tmp = f"{path}.tmp-{os.getpid()}"
    prof.export_chrome_trace(tmp)
    os.replace(tmp, path)
    return path


def mark_worker_range(name: str | None) -> None:
    """Open (``name``) or close (None) an NVTX range in this worker process while an ``nsys`` capture range is open
    (each call of a non-discrete nsys step gets one); nothing otherwise."""
    if _WORKER_TRACE is None or _WORKER_TRACE[1]["tool"] != "nsys":
        return
    if name is None:
        torch.cuda.nvtx.range_pop()
    else:
        torch.cuda.nvtx.range_push(name)


def run_worker_finish_hook(rank: int, spec: Mapping[str, Any]) -> int | None:
    """Run ``spec["finish_hook_cmd"]`` (a shell command; once, after the last traced step) when ``rank`` is one of
    ``spec["hook_ranks"]`` (None: every rank), with ``VERL_PROFILE_SAVE_PATH``, ``VERL_PROFILE_TOOL``,
    ``VERL_PROFILE_RANK``, ``VERL_PROFILE_PID`` and ``VERL_PROFILE_ROLE`` set; its exit status (None: not run).
    A failing hook is logged, not raised: the traces are already written."""
    import logging
    import subprocess

    hook_ranks = spec["hook_ranks"]
    cmd = spec["finish_hook_cmd"]
    if not cmd or (hook_ranks is not None and int(rank) not in hook_ranks):
        return None

    env = dict(os.environ)
    if spec["tool"] == "nsys":
        from verl.hardware.cuda_profile import RAY_NSIGHT_LOG_DIR, relocate_nsys_reports

        env["VERL_PROFILE_RAY_NSIGHT_DIR"] = RAY_NSIGHT_LOG_DIR
        if spec["relocate_results"]:  # the last range's report, written when its capture range closed
            relocate_nsys_reports(spec, os.getpid())
    env.update(
        VERL_PROFILE_SAVE_PATH=str(spec["save_path"]),
        VERL_PROFILE_TOOL=str(spec["tool"]),
        VERL_PROFILE_RANK=str(rank),
        VERL_PROFILE_PID=str(os.getpid()),
        VERL_PROFILE_ROLE=str(spec["role"]),
    )
    done = subprocess.run(str(cmd), shell=True, env=env, check=False)  # the user's own command (launch line)
    if done.returncode != 0:
        logging.getLogger(__name__).warning(
            "global_profiler.finish_hook_cmd exited %d on rank %d (role %s): %s",
            done.returncode,
            rank,
            spec["role"],
            cmd,
        )
    return done.returncode


def _finite_or_str(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def tensor_summary(t: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype, device and (for numeric tensors) min/max/mean/std over finite values plus NaN/Inf counts."""
    out: dict[str, Any] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "device": str(t.device)}
    if t.numel() == 0 or t.dtype == torch.bool or t.is_complex():
        if t.dtype == torch.bool and t.numel():
            out["true_fraction"] = float(t.float().mean().item())
        return out
    x = t.detach().float()
    finite = torch.isfinite(x)
    out["nan_count"] = int(torch.isnan(x).sum().item())
    out["inf_count"] = int(torch.isinf(x).sum().item())
    vals = x[finite]
    if vals.numel():
        out.update(
            min=_finite_or_str(vals.min().item()),
            max=_finite_or_str(vals.max().item()),
            mean=_finite_or_str(vals.mean().item()),
            std=_finite_or_str(vals.std(unbiased=False).item()),
        )
    return out


def _metric_value(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        v = v.detach().float().mean().item() if v.numel() else None
    elif isinstance(v, (np.ndarray, list, tuple)):
        arr = np.asarray(v, dtype=np.float64).reshape(-1) if len(v) else np.asarray([])
        v = float(arr.mean()) if arr.size else None
    elif isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v if isinstance(v, (int, float, str, bool)) or v is None else repr(v)


def dump_step_debug(batch: Any, metrics: Mapping[str, Any] | None, out_dir: str, step: int) -> str:
    """Write ``<out_dir>/step_<N>.json`` summarising one step and return its path.

    ``batch`` may be a DataProto (its ``batch`` tensors, ``non_tensor_batch`` arrays and ``meta_info`` keys are
    summarised), a mapping of name -> tensor, or None. Tensors ``[batch, ...]`` become :func:`tensor_summary`
    dicts; non-tensor columns their length and dtype; metrics their scalar values (lists averaged, non-finite
    values as strings so the file stays strict JSON).
    """
    record: dict[str, Any] = {"step": int(step), "metrics": {}, "tensors": {}, "non_tensors": {}, "meta_info": []}
    for key, value in (metrics or {}).items():
        record["metrics"][str(key)] = _metric_value(value)
    tensors: Mapping[str, Any] = {}
    if batch is not None and hasattr(batch, "batch") and hasattr(batch, "non_tensor_batch"):
        tensors = dict(batch.batch.items()) if batch.batch is not None else {}
        for key, arr in batch.non_tensor_batch.items():
            record["non_tensors"][key] = {"len": len(arr), "dtype": str(getattr(arr, "dtype", type(arr).__name__))}
        record["meta_info"] = sorted(str(k) for k in batch.meta_info)
    elif isinstance(batch, Mapping):
        tensors = batch
    elif batch is not None:
        raise TypeError(f"dump_step_debug: batch must be a DataProto, a dict of tensors or None, got {type(batch)}")
    for key, value in tensors.items():
        if isinstance(value, torch.Tensor):
            record["tensors"][str(key)] = tensor_summary(value)
    makedirs(out_dir)
    path = os.path.join(out_dir, f"step_{int(step)}.json")
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True))
    return path
