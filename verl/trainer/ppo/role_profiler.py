"""The driver's side of upstream v0.9's per-role profiler (``global_profiler`` + ``<role>.profiler``).

On each step of ``global_profiler.steps``, every worker group whose roles enable their profiler opens a trace on its
traced ranks (:meth:`Worker.start_profile`) and closes it when the step ends: a ``torch.profiler`` trace (tool
``torch``), an Nsight Systems capture range with NVTX ranges (``nsys``; ``discrete`` from ``tool_config.nsys``), or a
CUDA memory snapshot (``torch_memory``; as upstream, taken on every group on the traced steps, ``enable`` or not).
With ``profile_continuous_steps`` a run of consecutive steps (``[1,2,5]``: 1-2, then 5) shares one whole-step trace.

* ``actor_rollout`` (actor, reference and rollout share those workers): with the actor's or the reference's profiler
  enabled, one trace per rank holds the whole step (``discrete=false``) or each of the group's calls gets its own
  trace named after the call (``discrete=true``: ``compute_log_prob``, ``update_actor``, ...); with only the rollout's
  enabled, the generation window alone is traced (``generate_sequences``; upstream traces vLLM's engine there);
* ``critic``: the same from ``critic.profiler``.

``ranks`` / ``all_ranks`` pick the ranks (empty ranks: rank 0); ``contents`` what is recorded; traces go to
``<save_path>/<role>/step<N>[_<call>]_rank<R>.json`` (``relocate_results``: flat in ``save_path``, prefixed with the
role). ``finish_hook_cmd`` runs once after the last traced step on the hook ranks. Where several roles or ranks share
one process (colocated roles, the local backend), the first trace opened holds the work of all of them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.utils.errors import ConfigError

logger = logging.getLogger(__name__)

# worker group -> the roles (config sections) whose profiler drives it, in order of precedence
GROUP_ROLES = {
    "actor_rollout": ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout"),
    "critic": ("critic",),
}
_OWN_METHODS = frozenset({"start_profile", "stop_profile", "profile_finish_hook", "mark_profile_range"})


@dataclass
class GroupPlan:
    """What one worker group traces: its spec for :func:`verl.hardware.profiler.start_worker_trace` (without ``step``
    and ``stage``), the calls that get a trace each (None: the whole step), and its finish hook."""

    group: str
    spec: dict[str, Any]
    calls: frozenset[str] | None


def _or(value: Any, fallback: Any) -> Any:
    return value if value is not None else fallback


def _plan(cfg: DictConfig, group: str) -> GroupPlan | None:
    glob = cfg.global_profiler
    for path in GROUP_ROLES[group]:
        prof = OmegaConf.select(cfg, f"{path}.profiler")
        if prof is None:  # a hand-built config without upstream's per-role sections
            continue
        tool = _or(prof.tool, glob.tool)
        if tool not in ("torch", "nsys", "torch_memory") or not (bool(prof.enable) or tool == "torch_memory"):
            continue
        ranks = None if bool(prof.all_ranks) else sorted(int(r) for r in (list(prof.ranks) or [0]))
        hook_all = _or(prof.finish_hook_all_ranks, glob.finish_hook_all_ranks)
        hook_ranks = list(_or(prof.finish_hook_ranks, glob.finish_hook_ranks))
        mem, glob_mem = prof.tool_config.torch_memory, glob.global_tool_config.torch_memory
        spec = {
            "tool": str(tool),
            "role": group,
            "ranks": ranks,
            "contents": list(prof.tool_config.torch.contents),
            "memory": {
                "trace_alloc_max_entries": int(_or(mem.trace_alloc_max_entries, glob_mem.trace_alloc_max_entries)),
                "stack_depth": int(_or(mem.stack_depth, glob_mem.stack_depth)),
                "context": str(glob_mem.context),
                "stacks": str(glob_mem.stacks),
                "kw_args": OmegaConf.to_container(glob_mem.kw_args),
            },
            "save_path": str(_or(prof.save_path, glob.save_path)),
            "relocate_results": bool(_or(prof.relocate_results, glob.relocate_results)),
            "finish_hook_cmd": _or(prof.finish_hook_cmd, glob.finish_hook_cmd),
            "hook_ranks": None if bool(hook_all) else (sorted(int(r) for r in hook_ranks) if hook_ranks else ranks),
        }
        discrete = {
            "torch": bool(prof.tool_config.torch.discrete),
            "nsys": bool(_or(prof.tool_config.nsys.discrete, glob.global_tool_config.nsys.discrete)),
            "torch_memory": False,
        }[str(tool)]
        if path.endswith(".rollout") and tool != "torch_memory":
            calls: frozenset[str] | None = frozenset({"generate_sequences"})
        else:
            calls = None if not discrete else frozenset()  # empty: every call
        return GroupPlan(group, spec, calls)
    return None


def controller_command(cfg: DictConfig) -> str:
    """The ``nsys profile`` prefix for the driver from ``global_tool_config.nsys.controller_nsight_options`` (null
    values left out), followed by ``python3 -m verl.trainer.main_ppo ...``: upstream starts its driver actor under
    Nsight with these options; here the driver is the launched process, so the user launches it under nsys."""
    opts = OmegaConf.to_container(cfg.global_profiler.global_tool_config.nsys.controller_nsight_options)
    flags = " ".join(f"--{k}={v}" for k, v in opts.items() if v is not None)
    return f"nsys profile {flags} python3 -m verl.trainer.main_ppo ..."


def _runs(steps: list[int]) -> dict[int, int]:
    """First step -> last step of each run of consecutive steps (``[1, 2, 5]``: ``{1: 2, 5: 5}``)."""
    runs: dict[int, int] = {}
    for s in sorted(set(steps)):
        if s - 1 in steps:
            runs[next(k for k, v in runs.items() if v == s - 1)] = s
        else:
            runs[s] = s
    return runs


class RoleProfiler:
    """Per-role traces of the steps in ``global_profiler.steps`` (see the module docstring).

    Example::

        profiler = RoleProfiler.from_config(cfg)
        with profiler.step(global_step, worker_groups):
            trainer.train_step(batch)
        profiler.traces  # ["outputs/profile/actor_rollout/step1_rank0.json", ...]
    """

    def __init__(self, steps: list[int], plans: list[GroupPlan], continuous: bool = False) -> None:
        self.steps = frozenset(int(s) for s in steps)
        self.last_step = max(self.steps) if self.steps else None
        self.plans = plans
        # continuous: first step of a run -> its last step; otherwise each step is its own run
        self.runs = _runs(list(self.steps)) if continuous else {s: s for s in self.steps}
        self.traces: list[str] = []
        self._open: dict[str, int] = {}  # group -> the last step of the continuous trace it holds open

    @classmethod
    def from_config(cls, cfg: DictConfig) -> RoleProfiler:
        """Build from the whole trainer config (``global_profiler`` and the roles' ``profiler`` sections); a config
        without ``global_profiler`` (built by hand, not from ppo_trainer.yaml) traces nothing."""
        if OmegaConf.select(cfg, "global_profiler") is None:
            return cls([], [])
        steps = list(cfg.global_profiler.steps or [])
        plans = [p for g in GROUP_ROLES if (p := _plan(cfg, g)) is not None]
        if any(p.spec["tool"] in ("nsys", "torch_memory") for p in plans) and steps:
            from verl.utils.device import get_device_name

            if get_device_name(str(cfg.trainer.device)) != "cuda":  # auto (or VERL_DEVICE) resolved to CPU
                tool = next(p.spec["tool"] for p in plans if p.spec["tool"] != "torch")
                raise ConfigError(
                    f"global_profiler.tool={tool} needs CUDA (it captures CUDA work) and this run is on CPU; "
                    "use global_profiler.tool=torch (docs/profiling.md)"
                )
            if any(p.spec["tool"] == "nsys" for p in plans):
                logger.info(
                    "global_profiler.tool=nsys: to capture the driver too, run it as: %s", controller_command(cfg)
                )
        return cls(steps if plans else [], plans, bool(cfg.global_profiler.profile_continuous_steps))

    @property
    def enabled(self) -> bool:
        """Whether any step is traced."""
        return bool(self.steps)

    @contextlib.contextmanager
    def step(self, step: int, worker_groups: Mapping[str, Any]) -> Iterator[None]:
        """Trace the body on the planned groups when ``step`` is one of the steps; after the last, run the hooks.
        A whole-step trace of a continuous run opens at the run's first step and closes after its last (or when a
        step of the run raises)."""
        step = int(step)
        if step not in self.steps:
            yield
            return
        groups = [(plan, worker_groups[plan.group]) for plan in self.plans if plan.group in worker_groups]
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._driver_range(step))
            for plan, wg in groups:
                if plan.calls is not None:
                    stack.enter_context(self._per_call(plan, wg, step, traced=True))
                    continue
                if plan.group not in self._open:
                    through = self.runs.get(step, step)
                    wg.start_profile(dict(plan.spec, step=step, through=through, stage=None))
                    self._open[plan.group] = through
                if plan.spec["tool"] == "nsys":
                    stack.enter_context(self._per_call(plan, wg, step, traced=False))
                stack.push(self._closer(plan.group, wg, step))
            yield
        if step == self.last_step:
            for plan, wg in groups:
                if plan.spec["finish_hook_cmd"]:
                    wg.profile_finish_hook(plan.spec)

    def _closer(self, group: str, wg: Any, step: int) -> Any:
        """An exit callback closing ``group``'s whole-step trace after the last step of its run, or on an error."""

        def close(exc_type: Any, exc: Any, tb: Any) -> bool:
            if group in self._open and (exc_type is not None or self._open[group] == step):
                del self._open[group]
                self._stop(wg)
            return False

        return close

    @contextlib.contextmanager
    def _driver_range(self, step: int) -> Iterator[None]:
        """With nsys on a CUDA machine, an NVTX range ``step<N>`` in the driver's process (seen when the driver runs
        under ``nsys profile``, docs/profiling.md)."""
        import torch

        marked = any(p.spec["tool"] == "nsys" for p in self.plans) and torch.cuda.is_available()
        if marked:
            torch.cuda.nvtx.range_push(f"step{step}")
        try:
            yield
        finally:
            if marked:
                torch.cuda.nvtx.range_pop()

    def _stop(self, wg: Any) -> None:
        self.traces.extend(p for p in wg.stop_profile() if p)

    @contextlib.contextmanager
    def _per_call(self, plan: GroupPlan, wg: Any, step: int, traced: bool) -> Iterator[None]:
        """While the step runs, each of the group's calls (``plan.calls``; empty or None: all) gets its own trace
        (``traced``) or, inside an open nsys capture range, its own NVTX range on the workers."""
        names = [n for n in getattr(wg, "_bound_methods", {}) if n not in _OWN_METHODS]
        names = [n for n in names if not plan.calls or n in plan.calls]
        originals = {n: getattr(wg, n) for n in names}

        def wrapped(name: str, fn: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                if traced:
                    wg.start_profile(dict(plan.spec, step=step, through=None, stage=name))
                else:
                    wg.mark_profile_range(f"{plan.group}/{name} step{step}")
                try:
                    return fn(*args, **kwargs)
                finally:
                    if traced:
                        self._stop(wg)
                    else:
                        wg.mark_profile_range(None)

            return call

        for name, fn in originals.items():
            setattr(wg, name, wrapped(name, fn))
        try:
            yield
        finally:
            for name, fn in originals.items():
                setattr(wg, name, fn)
