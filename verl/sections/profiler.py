"""Profiler sections (upstream verl v0.9's ``global_profiler`` and the per-role ``<role>.profiler``).

``global_profiler`` picks the tool, the steps and where traces go; each role's ``profiler`` says whether that role's
workers are traced and on which ranks (upstream's ``verl/utils/profiler/config.py``: ``ProfilerConfig``,
``TorchProfilerToolConfig``, ``NsightToolConfig``, ``TorchMemoryToolConfig``). What each key does here is in
docs/profiling.md; the tools we do not have (Ascend ones) and the torch options we do not have are refused by
:mod:`verl.trainer.config.profiler_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from verl.base_config import BaseConfig, dict_field, list_field


@dataclass
class NsysToolConfig(BaseConfig):
    """``<role>.profiler.tool_config.nsys`` (tool ``nsys``): ``discrete`` true gives each call on the role's workers
    its own capture range (``torch.cuda.profiler.start``/``stop``), false one range per traced step; null follows
    ``global_profiler.global_tool_config.nsys.discrete`` (upstream interpolates the same)."""

    discrete: Optional[bool] = None


def _controller_nsight_options() -> dict[str, Any]:
    return {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph"}


def _worker_nsight_options() -> dict[str, Any]:
    return {
        **_controller_nsight_options(),
        "capture-range": "cudaProfilerApi",
        "capture-range-end": None,
        "kill": "none",
    }


@dataclass
class GlobalNsysToolConfig(BaseConfig):
    """``global_profiler.global_tool_config.nsys`` (upstream v0.9's ``NsightToolConfig`` plus the two option groups):
    ``discrete`` (the roles' default), ``worker_nsight_options`` (given to Ray as the workers'
    ``runtime_env={"nsight": ...}``, i.e. ``nsys profile --<key>=<value>`` around each worker process; null values
    left out, ``capture-range-end`` null: ``repeat-shutdown:<6 x len(steps)>``) and ``controller_nsight_options``
    (the ``nsys profile`` options for the driver, which the user launches under Nsight: docs/profiling.md)."""

    discrete: bool = False
    controller_nsight_options: dict[str, Any] = field(default_factory=_controller_nsight_options)
    worker_nsight_options: dict[str, Any] = field(default_factory=_worker_nsight_options)


@dataclass
class NPUToolConfig(BaseConfig):
    """``tool_config.npu`` (Ascend profiler, refused here): kept as written."""

    contents: list[str] = list_field()
    level: str = "level0"
    analysis: bool = True
    discrete: bool = False


@dataclass
class TorchMemoryToolConfig(BaseConfig):
    """``<role>.profiler.tool_config.torch_memory`` (tool ``torch_memory``: CUDA memory snapshots); null values
    follow ``global_profiler.global_tool_config.torch_memory`` (upstream interpolates the same)."""

    trace_alloc_max_entries: Optional[int] = None
    stack_depth: Optional[int] = None


@dataclass
class GlobalTorchMemoryToolConfig(BaseConfig):
    """``global_profiler.global_tool_config.torch_memory``: what ``torch.cuda.memory._record_memory_history``
    records on the traced steps: at most ``trace_alloc_max_entries`` allocation events, ``context`` (alloc, state,
    all), ``stacks`` (python, all), ``stack_depth`` and ``kw_args`` (more keyword arguments, e.g. ``device``) where
    the installed torch takes them."""

    trace_alloc_max_entries: int = 100000
    stack_depth: int = 32
    context: str = "all"
    stacks: str = "all"
    kw_args: dict[str, Any] = dict_field()


@dataclass
class PrecisionDebuggerToolConfig(BaseConfig):
    """``tool_config.precision_debugger`` (Ascend msprobe, refused here): kept as written."""

    config_path: Optional[str] = None
    steps: Optional[list[int]] = None
    stages: Optional[list[str]] = None
    strict: bool = False


@dataclass
class TorchScheduleConfig(BaseConfig):
    """``tool_config.torch.schedule``: upstream's sub-sampling of the update loop's mini-batches; all 0 (record
    the whole update) is the only setting here."""

    skip_first: int = 0
    wait: int = 0
    warmup: int = 0
    active: int = 0
    repeat: int = 0


@dataclass
class TorchToolConfig(BaseConfig):
    """``tool_config.torch``: what ``torch.profiler`` records (``contents``: cpu, cuda, memory, shapes, stack;
    empty: cpu and, when present, cuda) and whether each stage gets a trace of its own (``discrete``)."""

    contents: list[str] = list_field()
    discrete: bool = False
    schedule: TorchScheduleConfig = field(default_factory=TorchScheduleConfig)
    profile_token_start: Optional[int] = None  # upstream: vLLM engine token window; only null here
    profile_token_end: Optional[int] = None


@dataclass
class ProfilerToolConfig(BaseConfig):
    """``<role>.profiler.tool_config``: per-tool settings (``torch``, ``nsys``, ``torch_memory`` are read; the
    Ascend tools are refused, their settings kept as written)."""

    torch: TorchToolConfig = field(default_factory=TorchToolConfig)
    nsys: NsysToolConfig = field(default_factory=NsysToolConfig)
    npu: NPUToolConfig = field(default_factory=NPUToolConfig)
    torch_memory: TorchMemoryToolConfig = field(default_factory=TorchMemoryToolConfig)
    precision_debugger: PrecisionDebuggerToolConfig = field(default_factory=PrecisionDebuggerToolConfig)


@dataclass
class ProfilerConfig(BaseConfig):
    """``<role>.profiler`` (actor, ref, rollout, critic): whether this role's worker ranks are traced on the steps of
    ``global_profiler.steps``. ``tool``/``save_path``/``relocate_results``/``finish_hook_*`` left null follow
    ``global_profiler``."""

    tool: Optional[str] = None  # null: global_profiler.tool
    enable: bool = False
    all_ranks: bool = False
    ranks: list[int] = list_field()  # traced ranks when all_ranks is false (empty: rank 0)
    save_path: Optional[str] = None  # null: global_profiler.save_path
    relocate_results: Optional[bool] = None  # null: global_profiler.relocate_results
    finish_hook_cmd: Optional[str] = None  # null: global_profiler.finish_hook_cmd
    finish_hook_all_ranks: Optional[bool] = None
    finish_hook_ranks: Optional[list[int]] = None
    tool_config: ProfilerToolConfig = field(default_factory=ProfilerToolConfig)


@dataclass
class GlobalToolConfig(BaseConfig):
    """``global_profiler.global_tool_config``: Nsight Systems' and the memory snapshots' settings (a role's own
    non-null ``tool_config`` value wins); ``precision_debugger`` (refused tool) kept as written."""

    nsys: GlobalNsysToolConfig = field(default_factory=GlobalNsysToolConfig)
    torch_memory: GlobalTorchMemoryToolConfig = field(default_factory=GlobalTorchMemoryToolConfig)
    precision_debugger: PrecisionDebuggerToolConfig = field(default_factory=PrecisionDebuggerToolConfig)


@dataclass
class GlobalProfilerConfig(BaseConfig):
    """``global_profiler`` (upstream v0.9): the tool (null: off; ``torch``, ``nsys``, ``torch_memory``), the global
    steps to trace, whether a run of consecutive steps shares one trace (``profile_continuous_steps``), where traces
    go, and a command run once after the last traced step (``finish_hook_cmd``)."""

    tool: Optional[str] = None
    steps: Optional[list[int]] = None
    profile_continuous_steps: bool = False  # true: steps [1,2,5] -> one trace of 1-2, one of 5
    save_path: str = "outputs/profile"
    relocate_results: bool = False  # false: <save_path>/<role>/...; true: every trace flat in <save_path>
    finish_hook_cmd: Optional[str] = None
    finish_hook_all_ranks: bool = False
    finish_hook_ranks: list[int] = list_field()  # ranks that run the hook (empty: the traced ranks)
    global_tool_config: GlobalToolConfig = field(default_factory=GlobalToolConfig)
