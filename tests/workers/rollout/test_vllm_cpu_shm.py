"""verl.workers.rollout.vllm_cpu_shm: each vLLM CPU tensor-parallel group names its shared memory after its own first
rank, and only dead groups' segments are removed."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from verl.workers.rollout.vllm_cpu_shm import group_ident, remove_dead_segments, remove_group_segments, use_group_ident


def test_only_dead_groups_segments_are_removed(tmp_path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid, live_pid = int(dead.stdout), os.getpid()
    names = [
        f"verl{dead_pid}-29500-tp:0-[0-1]-cpushm_0",
        f"verl{dead_pid}-29500-tp:0-[0-1]-cpushm_1",
        f"verl{live_pid}-29501-tp:0-[0-1]-cpushm_0",  # a group alive now: kept
        "-tp:0-[0-1]-cpushm_0",  # vLLM's own name (another program's engine): not ours to judge
        "psm_1234",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert remove_dead_segments(shm_dir=str(tmp_path)) == names[:2]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])
    assert remove_dead_segments(shm_dir=str(tmp_path / "missing")) == []
    # a stopped engine removes its own group's segments, whether its first rank still runs or not
    assert remove_group_segments(f"verl{live_pid}-29501", shm_dir=str(tmp_path)) == [names[2]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[3:])


def test_vllms_group_name_carries_the_ident(monkeypatch) -> None:
    cpu_communicator = pytest.importorskip("vllm.distributed.device_communicators.cpu_communicator")
    shm_cls = cpu_communicator._CPUSHMDistributed
    monkeypatch.setattr(shm_cls, "make_group_name", shm_cls.__dict__["make_group_name"])  # vLLM's, after the test
    monkeypatch.setenv("VLLM_DIST_IDENT", "//")  # what vLLM's CPU worker sets under external_launcher
    group = types.SimpleNamespace(unique_name="tp:0", ranks=[0, 1])
    assert shm_cls.make_group_name(group) == "//-tp:0-[0-1]-cpushm"  # every group on the host alike
    assert use_group_ident("verl123-29500") and use_group_ident("verl456-29501")  # wrapped once, ident replaced
    assert shm_cls.make_group_name(group) == "verl456-29501-tp:0-[0-1]-cpushm"


def _two_groups(rank: int, init_file: str, out_dir: str) -> None:
    os.environ["MASTER_PORT"] = "29577"
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=4)
    try:
        ident = group_ident(first_rank=(rank // 2) * 2)  # two groups of 2 consecutive ranks, as vLLM builds them
        with open(os.path.join(out_dir, f"rank{rank}"), "w") as f:
            f.write(f"{os.getpid()} {ident}")
    finally:
        dist.destroy_process_group()


def test_the_ranks_of_a_group_share_its_first_ranks_ident(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    start_method = "spawn" if dist.is_initialized() else "fork"  # a forked child would inherit a group held here
    mp.start_processes(
        _two_groups, args=(str(tmp_path / "rdzv"), str(tmp_path)), nprocs=4, join=True, start_method=start_method
    )
    seen = [(tmp_path / f"rank{r}").read_text().split() for r in range(4)]
    pids = [int(pid) for pid, _ in seen]
    assert [ident for _, ident in seen] == [f"verl{pids[0]}-29577"] * 2 + [f"verl{pids[2]}-29577"] * 2
