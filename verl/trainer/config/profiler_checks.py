"""Config-time checks of upstream v0.9's profiler keys (``global_profiler``, ``<role>.profiler``).

The tools taken here (:mod:`verl.trainer.ppo.role_profiler`): ``torch`` (``torch.profiler`` traces), ``nsys`` (NVTX
ranges and ``cudaProfilerStart``/``Stop`` capture ranges for Nsight Systems) and ``torch_memory`` (CUDA memory
snapshots). The Ascend tools of upstream's ``verl/utils/profiler/`` (NPU profiler, msprobe precision debugger), the
CUDA tools with ``trainer.device=cpu``, and the torch options that tune vLLM's engine-side profiler or sub-sample the
update loop are refused with one line each. When the tool itself is refused, that is the only line (its options
would not be read anyway).
"""

from __future__ import annotations

from omegaconf import DictConfig

ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic")
TOOLS = ("torch", "nsys", "torch_memory")
CUDA_TOOLS = {
    "nsys": "Nsight Systems captures CUDA work (cudaProfilerStart/Stop ranges)",
    "torch_memory": "CUDA memory snapshots record the CUDA caching allocator",
}
_REFUSED_TOOLS = {
    "npu": "the Ascend NPU profiler is not available here (NPU is not a device here)",
    "precision_debugger": "the Ascend msprobe precision debugger is not available here",
}


def _node(cfg: DictConfig, path: str) -> DictConfig:
    node = cfg
    for part in path.split("."):
        node = node[part]
    return node


def check_profiler(cfg: DictConfig, errors: list[str]) -> None:
    """Append one error per profiler value this project cannot honour (at most one when the tool is refused)."""
    glob = cfg.global_profiler
    tools = [("global_profiler.tool", glob.tool)]
    tools += [(f"{r}.profiler.tool", _node(cfg, r).profiler.tool) for r in ROLES if _node(cfg, r).profiler.tool]
    for key, tool in tools:
        if tool is not None and str(tool) not in TOOLS:
            why = _REFUSED_TOOLS.get(str(tool), f"{tool!r} is not a profiler here")
            errors.append(f"{key}={tool}: {why}; use {key}=torch (torch.profiler traces, docs/profiling.md)")
            return
        if tool is not None and str(tool) in CUDA_TOOLS and str(cfg.trainer.device) == "cpu":
            errors.append(
                f"{key}={tool} with trainer.device=cpu: {CUDA_TOOLS[str(tool)]}, which is not available here on "
                f"CPU; use {key}=torch (torch.profiler traces CPU work, docs/profiling.md)"
            )
            return
    mem = glob.global_tool_config.torch_memory
    for k, allowed in (("context", ("alloc", "state", "all")), ("stacks", ("python", "all"))):
        if str(mem[k]) not in allowed:
            errors.append(f"global_profiler.global_tool_config.torch_memory.{k}={mem[k]}: use one of {allowed}")
    for role in ROLES:
        torch_cfg = _node(cfg, role).profiler.tool_config.torch
        sched = torch_cfg.schedule
        if any(int(sched[k]) != 0 for k in ("skip_first", "wait", "warmup", "active", "repeat")):
            errors.append(
                f"{role}.profiler.tool_config.torch.schedule (sub-sampling the update mini-batches) is not "
                "implemented here; leave every field 0: the whole step is recorded"
            )
        for k in ("profile_token_start", "profile_token_end"):
            if torch_cfg[k] is not None:
                errors.append(
                    f"{role}.profiler.tool_config.torch.{k}={torch_cfg[k]} (vLLM engine-side token window) is not "
                    "implemented here; leave it null: the whole generation is traced"
                )
        unknown = sorted(set(torch_cfg.contents) - {"cpu", "cuda", "memory", "shapes", "stack"})
        if unknown:
            errors.append(
                f"{role}.profiler.tool_config.torch.contents: {unknown} are not torch.profiler contents here; use "
                "cpu, cuda, memory, shapes, stack"
            )
