"""Shared-memory names of vLLM's CPU tensor-parallel groups: one set per group, and dead runs' segments removed.

vLLM's CPU communicator (``vllm.distributed.device_communicators.cpu_communicator``) passes a tensor- or
pipeline-parallel group's activations through shared-memory segments named ``<ident>-<group>-[<ranks>]-cpushm_<i>``
(in ``/dev/shm``), where ``<ident>`` is ``$VLLM_DIST_IDENT``, which its CPU worker derives from the executor's init
method. Under the ``external_launcher`` executor that method is always ``env://``, so every engine group on a host
with the same ranks asks for the same names: a second job on the machine, or a second tensor-parallel replica of a
fully-async run, fails with ``create shm in SHMManager failed. errno: 17``, and the segments a killed run leaves
behind block every later start.

Here each group names its segments ``verl<pid>-<port>-...``: the process id of the group's first rank and the port
of its torch.distributed store (``MASTER_PORT``), the same on every rank of the group and different between groups
alive at once. A stopped engine removes its group's segments (vLLM leaves them); before a group makes its own, its
first rank removes those of groups whose first rank no longer runs on this host (a killed run's). Unlinking a name
leaves any live process's mapping intact.
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

SHM_DIR = "/dev/shm"
# verl<pid>-<port>-tp:<n>-[<ranks>]-cpushm_<i> (or pp:<n>), as made by vLLM with the ident from group_ident()
_OUR_SEGMENT = re.compile(r"^verl(\d+)-\d+-(?:tp|pp)\S*-cpushm")

_ident: list[str] = []  # the ident of the group this process's engine is being built for (set by use_group_ident)


def group_ident(first_rank: int) -> str:
    """The ident shared by the ranks of the tensor-parallel group whose first rank is ``first_rank``, in the current
    torch.distributed world: ``verl<pid of first_rank>-<MASTER_PORT>``. A collective: every rank of the world calls
    it (each group reads its own first rank's pid from one all-gather)."""
    dist = torch.distributed
    pids: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(pids, os.getpid())
    return f"verl{pids[first_rank]}-{os.environ.get('MASTER_PORT', '0')}"


def use_group_ident(ident: str) -> bool:
    """Make the vLLM engine built next in this process name its CPU segments with ``ident`` (see the module
    docstring); returns False when this vLLM has no such communicator (its names are then vLLM's own)."""
    try:
        from vllm.distributed.device_communicators import cpu_communicator
    except ImportError:
        return False
    shm_cls = getattr(cpu_communicator, "_CPUSHMDistributed", None)
    original = getattr(shm_cls, "make_group_name", None)
    if original is None:
        return False
    _ident[:] = [ident]
    if not getattr(original, "_verl_ident", False):

        def make_group_name(communicator: Any) -> str:
            # vLLM's worker sets VLLM_DIST_IDENT from its init method just before the groups are made: ours wins
            os.environ["VLLM_DIST_IDENT"] = _ident[0]
            return original(communicator)

        make_group_name._verl_ident = True  # type: ignore[attr-defined]
        shm_cls.make_group_name = staticmethod(make_group_name)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_group_segments(ident: str, shm_dir: str = SHM_DIR) -> list[str]:
    """Delete the CPU segments of the group named ``ident`` (its engine has stopped: vLLM leaves them behind)."""
    if not os.path.isdir(shm_dir):
        return []
    return _unlink(shm_dir, [name for name in sorted(os.listdir(shm_dir)) if name.startswith(f"{ident}-")])


def _unlink(shm_dir: str, names: list[str]) -> list[str]:
    removed = []
    for name in names:
        try:
            os.unlink(os.path.join(shm_dir, name))
            removed.append(name)
        except OSError:  # removed by another rank or process meanwhile
            pass
    return removed


def remove_dead_segments(shm_dir: str = SHM_DIR) -> list[str]:
    """Delete the CPU segments of groups named by :func:`group_ident` whose first rank is no longer alive on this
    host (a killed run's, which would otherwise hold their memory until reboot); returns the names removed."""
    if not os.path.isdir(shm_dir):
        return []
    dead = []
    for name in sorted(os.listdir(shm_dir)):
        match = _OUR_SEGMENT.match(name)
        if match is not None and not _alive(int(match.group(1))):
            dead.append(name)
    return _unlink(shm_dir, dead)
