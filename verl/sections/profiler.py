"""Profiler sections (upstream verl v0.9's ``global_profiler`` and the per-role ``<role>.profiler``).

``global_profiler`` picks the tool, the steps and where traces go; each role's ``profiler`` says whether that role's
workers are traced and on which ranks (upstream's ``verl/utils/profiler/config.py``: ``ProfilerConfig``,
``TorchProfilerToolConfig``). What each key does here is in docs/profiling.md; the tools other than ``torch``, and
the torch options we do not have, are refused by :mod:`verl.trainer.config.profiler_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from verl.base_config import BaseConfig, list_field


@dataclass
class NsysToolConfig(BaseConfig):
    """``tool_config.nsys`` (Nsight Systems, refused here): kept as written."""

    discrete: bool = False


@dataclass
class NPUToolConfig(BaseConfig):
    """``tool_config.npu`` (Ascend profiler, refused here): kept as written."""

    contents: list[str] = list_field()
    level: str = "level0"
    analysis: bool = True
    discrete: bool = False


@dataclass
class TorchMemoryToolConfig(BaseConfig):
    """``tool_config.torch_memory`` (CUDA memory snapshots, refused here): kept as written."""

    trace_alloc_max_entries: int = 100000
    stack_depth: int = 32


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
    """``<role>.profiler.tool_config``: per-tool settings; only ``torch``'s are read (the other tools are refused,
    their settings kept as written)."""

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
    """``global_profiler.global_tool_config``: settings of the tools refused here, kept as written."""

    nsys: NsysToolConfig = field(default_factory=NsysToolConfig)
    torch_memory: TorchMemoryToolConfig = field(default_factory=TorchMemoryToolConfig)
    precision_debugger: PrecisionDebuggerToolConfig = field(default_factory=PrecisionDebuggerToolConfig)


@dataclass
class GlobalProfilerConfig(BaseConfig):
    """``global_profiler`` (upstream v0.9): the tool (null: off; ``torch`` here), the global steps to trace, where
    traces go, and a command run once after the last traced step (``finish_hook_cmd``)."""

    tool: Optional[str] = None
    steps: Optional[list[int]] = None
    profile_continuous_steps: bool = False
    save_path: str = "outputs/profile"
    relocate_results: bool = False  # false: <save_path>/<role>/...; true: every trace flat in <save_path>
    finish_hook_cmd: Optional[str] = None
    finish_hook_all_ranks: bool = False
    finish_hook_ranks: list[int] = list_field()  # ranks that run the hook (empty: the traced ranks)
    global_tool_config: GlobalToolConfig = field(default_factory=GlobalToolConfig)
