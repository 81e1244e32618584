"""The driver's side of upstream v0.9's per-role profiler (``global_profiler`` + ``<role>.profiler``).

On each step of ``global_profiler.steps`` (tool ``torch``), every worker group whose roles enable their profiler
opens a ``torch.profiler`` trace on its traced ranks (:meth:`Worker.start_profile`) and writes it when the step ends:

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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

# worker group -> the roles (config sections) whose profiler drives it, in order of precedence
GROUP_ROLES = {
    "actor_rollout": ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout"),
    "critic": ("critic",),
}
_OWN_METHODS = frozenset({"start_profile", "stop_profile", "profile_finish_hook"})


@dataclass
class GroupPlan:
    """What one worker group traces: its spec for :func:`verl.hardware.profiler.start_worker_trace` (without ``step``
    and ``stage``), the calls that get a trace each (None: the whole step), and its finish hook."""

    group: str
    spec: dict[str, Any]
    calls: frozenset[str] | None


def _plan(cfg: DictConfig, group: str) -> GroupPlan | None:
    glob = cfg.global_profiler
    for path in GROUP_ROLES[group]:
        prof = OmegaConf.select(cfg, f"{path}.profiler")
        if prof is None:  # a hand-built config without upstream's per-role sections
            continue
        tool = prof.tool if prof.tool is not None else glob.tool
        if not bool(prof.enable) or tool != "torch":
            continue
        ranks = None if bool(prof.all_ranks) else sorted(int(r) for r in (list(prof.ranks) or [0]))
        hook_all = prof.finish_hook_all_ranks if prof.finish_hook_all_ranks is not None else glob.finish_hook_all_ranks
        hook_ranks = (
            list(prof.finish_hook_ranks) if prof.finish_hook_ranks is not None else list(glob.finish_hook_ranks)
        )
        spec = {
            "role": group,
            "ranks": ranks,
            "contents": list(prof.tool_config.torch.contents),
            "save_path": str(prof.save_path if prof.save_path is not None else glob.save_path),
            "relocate_results": bool(
                prof.relocate_results if prof.relocate_results is not None else glob.relocate_results
            ),
            "finish_hook_cmd": prof.finish_hook_cmd if prof.finish_hook_cmd is not None else glob.finish_hook_cmd,
            "hook_ranks": None if bool(hook_all) else (sorted(int(r) for r in hook_ranks) if hook_ranks else ranks),
        }
        if path.endswith(".rollout"):
            calls: frozenset[str] | None = frozenset({"generate_sequences"})
        else:
            calls = None if not bool(prof.tool_config.torch.discrete) else frozenset()  # empty: every call
        return GroupPlan(group, spec, calls)
    return None


class RoleProfiler:
    """Per-role ``torch.profiler`` traces of the steps in ``global_profiler.steps`` (see the module docstring).

    Example::

        profiler = RoleProfiler.from_config(cfg)
        with profiler.step(global_step, worker_groups):
            trainer.train_step(batch)
        profiler.traces  # ["outputs/profile/actor_rollout/step1_rank0.json", ...]
    """

    def __init__(self, steps: list[int], plans: list[GroupPlan]) -> None:
        self.steps = frozenset(int(s) for s in steps)
        self.last_step = max(self.steps) if self.steps else None
        self.plans = plans
        self.traces: list[str] = []

    @classmethod
    def from_config(cls, cfg: DictConfig) -> RoleProfiler:
        """Build from the whole trainer config (``global_profiler`` and the roles' ``profiler`` sections); a config
        without ``global_profiler`` (built by hand, not from ppo_trainer.yaml) traces nothing."""
        if OmegaConf.select(cfg, "global_profiler") is None:
            return cls([], [])
        steps = list(cfg.global_profiler.steps or [])
        plans = [p for g in GROUP_ROLES if (p := _plan(cfg, g)) is not None]
        return cls(steps if plans else [], plans)

    @property
    def enabled(self) -> bool:
        """Whether any step is traced."""
        return bool(self.steps)

    @contextlib.contextmanager
    def step(self, step: int, worker_groups: Mapping[str, Any]) -> Iterator[None]:
        """Trace the body on the planned groups when ``step`` is one of the steps; after the last, run the hooks."""
        if int(step) not in self.steps:
            yield
            return
        groups = [(plan, worker_groups[plan.group]) for plan in self.plans if plan.group in worker_groups]
        with contextlib.ExitStack() as stack:
            for plan, wg in groups:
                if plan.calls is None:
                    wg.start_profile(dict(plan.spec, step=int(step), stage=None))
                    stack.callback(self._stop, wg)
                else:
                    stack.enter_context(self._per_call(plan, wg, int(step)))
            yield
        if int(step) == self.last_step:
            for plan, wg in groups:
                if plan.spec["finish_hook_cmd"]:
                    wg.profile_finish_hook(plan.spec)

    def _stop(self, wg: Any) -> None:
        self.traces.extend(p for p in wg.stop_profile() if p)

    @contextlib.contextmanager
    def _per_call(self, plan: GroupPlan, wg: Any, step: int) -> Iterator[None]:
        """While the step runs, each of the group's calls (``plan.calls``; empty: all) is traced on its own."""
        names = [n for n in getattr(wg, "_bound_methods", {}) if n not in _OWN_METHODS]
        names = [n for n in names if not plan.calls or n in plan.calls]
        originals = {n: getattr(wg, n) for n in names}

        def traced(name: str, fn: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                wg.start_profile(dict(plan.spec, step=step, stage=name))
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._stop(wg)

            return call

        for name, fn in originals.items():
            setattr(wg, name, traced(name, fn))
        try:
            yield
        finally:
            for name, fn in originals.items():
                setattr(wg, name, fn)
