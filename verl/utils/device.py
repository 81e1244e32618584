"""Device selection and torch.distributed set-up that work the same on CPU (gloo) and GPU (nccl)."""

from __future__ import annotations

import os

import torch

is_cuda_available: bool = torch.cuda.is_available()  # verl's module constant


def get_device_name(preference: str = "auto") -> str:
    """``"cuda"`` when a GPU is usable (and not disabled), else ``"cpu"``.

    ``preference`` is ``auto``, ``cpu`` or ``cuda``; ``VERL_DEVICE`` in the environment overrides ``auto``.
    Asking for ``cuda`` without one is an error rather than a silent fallback.
    """
    preference = os.environ.get("VERL_DEVICE", preference) if preference == "auto" else preference
    if preference == "cpu":
        return "cpu"
    if preference == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("trainer.device=cuda but torch.cuda.is_available() is False on this machine")
        return "cuda"
    if preference != "auto":
        raise ValueError(f"unknown device {preference!r}; expected auto, cpu or cuda")
    return "cuda" if torch.cuda.is_available() else "cpu"


def get_torch_device(device_name: str) -> torch.device:
    """The ``torch.device`` of this process: ``cuda:<LOCAL_RANK>`` on GPU, ``cpu`` otherwise."""
    if device_name == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def distributed_backend(device_name: str) -> str:
    """nccl for GPUs, gloo for CPUs."""
    return "nccl" if device_name == "cuda" else "gloo"


def get_nccl_backend() -> str:
    """Upstream's name: the collective backend of this process's device (``nccl`` on GPU, ``gloo`` on CPU)."""
    return distributed_backend(get_device_name())


def init_distributed_if_needed(device_name: str, timeout_s: float = 1800.0) -> bool:
    """Initialise the default process group from RANK/WORLD_SIZE/MASTER_* when WORLD_SIZE > 1; ``timeout_s`` bounds
    each collective (``actor_rollout_ref.nccl_timeout``).

    Returns True when a process group is (now) active.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return False
    if not torch.distributed.is_initialized():
        if device_name == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        from verl.utils.distributed import init_process_group_from_env

        # env:// semantics; a loopback MASTER_ADDR keeps the rendezvous store and gloo/NCCL sockets on loopback
        init_process_group_from_env(distributed_backend(device_name), timeout_s=timeout_s)
    return True


def module_compute_device(module: torch.nn.Module) -> torch.device:
    """The device ``module``'s forward computes on: where its first parameter is, except for FSDP2-sharded
    parameters (DTensors), whose device mesh names it. Under FSDP2's ``CPUOffloadPolicy``
    (``fsdp_config.offload_policy``) the shards live in CPU memory while every forward gathers them onto the mesh's
    GPU, so inputs, autocast and ``dtype: auto`` must follow the mesh, not the shards. CPU for a parameterless module.
    """
    for param in module.parameters():
        mesh = getattr(param, "device_mesh", None)  # a DTensor's; plain tensors have none
        mesh_type = getattr(mesh, "device_type", None)
        if mesh_type is None or mesh_type == param.device.type:
            return param.device
        if mesh_type == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device(mesh_type)
    return torch.device("cpu")


# peaks recorded before a reset of CUDA's peak counters (see reset_peak_memory_stats below), per device index
_LIFETIME_PEAKS: dict[int, dict[str, int]] = {}


def _cuda_index(device: torch.device | int | None) -> int:
    if device is None:
        return torch.cuda.current_device()
    index = device if isinstance(device, int) else torch.device(device).index
    return torch.cuda.current_device() if index is None else index


def reset_peak_memory_stats(device: torch.device | int | None = None) -> None:
    """Reset CUDA's peak-memory counters of ``device`` (to measure one step's peak) while keeping the process's
    lifetime peaks for :func:`lifetime_max_memory`, so ``perf/max_memory_allocated_gb`` still means the lifetime
    peak after a component measured its own."""
    index = _cuda_index(device)
    kept = _LIFETIME_PEAKS.setdefault(index, {"allocated": 0, "reserved": 0})
    kept["allocated"] = max(kept["allocated"], torch.cuda.max_memory_allocated(index))
    kept["reserved"] = max(kept["reserved"], torch.cuda.max_memory_reserved(index))
    torch.cuda.reset_peak_memory_stats(index)


def lifetime_max_memory(kind: str = "allocated", device: torch.device | int | None = None) -> int:
    """The process's peak CUDA memory of ``device`` in bytes (``kind``: allocated | reserved), across the resets of
    :func:`reset_peak_memory_stats`."""
    index = _cuda_index(device)
    current = torch.cuda.max_memory_allocated(index) if kind == "allocated" else torch.cuda.max_memory_reserved(index)
    return max(current, _LIFETIME_PEAKS.get(index, {}).get(kind, 0))
