"""The CUDA-only tools of the per-role profiler: Nsight Systems capture ranges and CUDA memory snapshots.

Upstream verl v0.9 names and behaviour (``verl/utils/profiler/nvtx_profile.py``, ``torch_memory_profile.py``,
``docs/perf/nsight_profiling.md``):

* ``nsys``: the worker processes run under ``nsys profile --capture-range=cudaProfilerApi`` (Ray's
  ``runtime_env={"nsight": ...}``); a traced step (or call, ``discrete``) opens a capture range with
  ``torch.cuda.profiler.start()`` (``cudaProfilerStart``) and closes it with ``stop()``, and every range carries an
  NVTX range (``torch.cuda.nvtx.range_push``/``range_pop``) named after the role, call and step. Ray writes the
  reports to :data:`RAY_NSIGHT_LOG_DIR` as ``worker_process_<pid>[.<range>].nsys-rep``; ``relocate_results`` moves
  this process's reports into ``save_path``.
* ``torch_memory``: a traced step records the CUDA caching allocator's history
  (``torch.cuda.memory._record_memory_history``) and writes it as a snapshot pickle when the step ends
  (``torch.cuda.memory._dump_snapshot``; open it in https://pytorch.org/memory_viz).

The functions here are called by :mod:`verl.hardware.profiler` in the worker process; they hold no state.
"""

from __future__ import annotations

import glob
import inspect
import logging
import os
import shutil
import socket
from collections.abc import Mapping
from typing import Any

import torch

from verl.utils.fs import makedirs

logger = logging.getLogger(__name__)

# Ray's fixed directory for Nsight reports (https://docs.ray.io/en/latest/ray-observability/user-guides/profiling.html)
RAY_NSIGHT_LOG_DIR = "/tmp/ray/session_latest/logs/nsight"


def nvtx_label(spec: Mapping[str, Any]) -> str:
    """The NVTX range name of a traced step or call: ``<role>[/<call>] step<N>[-<M>]``."""
    stage = f"/{spec['stage']}" if spec["stage"] else ""
    through = f"-{int(spec['through'])}" if spec["through"] not in (None, spec["step"]) else ""
    return f"{spec['role']}{stage} step{int(spec['step'])}{through}"


def nsys_start(spec: Mapping[str, Any]) -> None:
    """Open a capture range (``cudaProfilerStart``) and an NVTX range named by :func:`nvtx_label`."""
    torch.cuda.profiler.start()
    torch.cuda.nvtx.range_push(nvtx_label(spec))


def nsys_stop() -> None:
    """Close the NVTX range and the capture range :func:`nsys_start` opened (``cudaProfilerStop``)."""
    torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()


def relocate_nsys_reports(spec: Mapping[str, Any], pid: int, src_dir: str = RAY_NSIGHT_LOG_DIR) -> list[str]:
    """Move this process's finished reports (``worker_process_<pid>*.nsys-rep`` in ``src_dir``) into
    ``spec["save_path"]`` as ``<role>_<host>_<name>``; a report nsys has not written yet is moved on a later call.
    Returns the new paths."""
    moved = []
    for src in sorted(glob.glob(os.path.join(src_dir, f"worker_process_{int(pid)}*.nsys-rep"))):
        makedirs(str(spec["save_path"]))
        dst = os.path.join(str(spec["save_path"]), f"{spec['role']}_{socket.gethostname()}_{os.path.basename(src)}")
        shutil.move(src, dst)
        moved.append(dst)
    return moved


def record_memory_kwargs(memory: Mapping[str, Any], signature_of: Any = None) -> dict[str, Any]:
    """Keyword arguments of ``torch.cuda.memory._record_memory_history`` from ``spec["memory"]``
    (``trace_alloc_max_entries``, ``stack_depth``, ``context``, ``stacks``, ``kw_args``), kept to the parameters the
    installed torch takes (``max_entries`` / ``trace_alloc_max_entries``, ``stack_depth`` where it exists)."""
    params = set(inspect.signature(signature_of or torch.cuda.memory._record_memory_history).parameters)
    wanted: dict[str, Any] = {"enabled": "all", "context": memory["context"], "stacks": memory["stacks"]}
    wanted["max_entries" if "max_entries" in params else "trace_alloc_max_entries"] = int(
        memory["trace_alloc_max_entries"]
    )
    if "stack_depth" in params:
        wanted["stack_depth"] = int(memory["stack_depth"])
    elif int(memory["stack_depth"]) != 32:
        logger.warning("torch_memory.stack_depth=%s: this torch records whole stacks", memory["stack_depth"])
    unknown = sorted(set(memory["kw_args"]) - params)
    if unknown:
        raise ValueError(
            f"global_profiler.global_tool_config.torch_memory.kw_args: {unknown} are not arguments of this torch's "
            f"torch.cuda.memory._record_memory_history {sorted(params)}"
        )
    return {**{k: v for k, v in wanted.items() if k in params}, **dict(memory["kw_args"])}


def memory_start(spec: Mapping[str, Any]) -> None:
    """Start recording the CUDA allocator's history with the step's options (:func:`record_memory_kwargs`)."""
    torch.cuda.memory._record_memory_history(**record_memory_kwargs(spec["memory"]))


def memory_stop(path: str) -> str:
    """Write the recorded history to ``path`` (a snapshot pickle, under a temporary name then renamed) and stop
    recording. Returns ``path``."""
    makedirs(os.path.dirname(path) or ".")
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        torch.cuda.memory._dump_snapshot(tmp)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    os.replace(tmp, path)
    return path
