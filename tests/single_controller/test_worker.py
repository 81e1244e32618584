"""Worker placement from the environment, and the backend-neutral factory."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from verl.single_controller import Dispatch, Worker, create_worker_group, register
from verl.single_controller.base.worker import in_process_worker_env


class EchoWorker(Worker):
    def __init__(self, value: int = 0) -> None:
        self.value = value

    @register(Dispatch.ONE_TO_ALL)
    def get(self) -> tuple[int, int, int]:
        return self.rank, self.world_size, self.value


class NoSuperInit(Worker):
    def __init__(self) -> None:  # deliberately does not call super().__init__()
        self.x = 1


def test_standalone_worker_defaults_and_leaves_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    w = NoSuperInit()
    assert (w.rank, w.world_size, w.local_rank, w.local_world_size) == (0, 1, 0, 1)
    addr, port = w.get_master_addr_port()
    assert addr == "127.0.0.1" and port is not None and int(port) > 0
    assert "MASTER_PORT" not in os.environ and "RANK" not in os.environ


def test_worker_reads_rank_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    w = EchoWorker()
    assert (w.rank, w.world_size, w.local_rank, w.local_world_size) == (2, 4, 0, 2)
    assert w.dist_env == {
        "RANK": "2",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
    }
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="RANK=4 WORLD_SIZE=4"):
        EchoWorker()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK='x' is not an integer"):
        EchoWorker()


def test_in_process_ranks_cannot_form_a_process_group() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    with in_process_worker_env(env):
        w = EchoWorker()
    assert (w.rank, w.world_size) == (1, 2)
    with pytest.raises(RuntimeError, match="local backend runs all 2 ranks inside the driver process"):
        w.init_distributed()


def test_local_single_rank_init_distributed() -> None:
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this test process")
    group = create_worker_group("local", EchoWorker, {"value": 3}, world_size=1)
    worker = group.workers[0]
    try:
        worker.init_distributed()
        worker.init_distributed()  # a second call (e.g. another colocated role) is a no-op
        t = torch.tensor([2.0], device=worker.device)
        dist.all_reduce(t)
        assert dist.get_world_size() == 1 and t.item() == 2.0
    finally:
        dist.destroy_process_group()


def test_factory_local_and_unknown_backend() -> None:
    group = create_worker_group("local", EchoWorker, {"value": 3}, world_size=3)
    assert group.get() == [(0, 3, 3), (1, 3, 3), (2, 3, 3)]
    with pytest.raises(ValueError, match="unknown single-controller backend 'mpi'; choose one of local, ray"):
        create_worker_group("mpi", EchoWorker, {}, world_size=1)
    with pytest.raises(TypeError, match="must derive from verl.single_controller.base.Worker"):
        create_worker_group("local", dict, {}, world_size=1)


def test_registered_name_clashing_with_group_api_is_rejected() -> None:
    class Clash(Worker):
        @register(Dispatch.ONE_TO_ALL)
        def execute_all(self) -> None: ...

    with pytest.raises(ValueError, match="Clash.execute_all is registered but LocalWorkerGroup already has"):
        create_worker_group("local", Clash, {}, world_size=1)


def test_importing_single_controller_does_not_import_ray() -> None:
    code = (
        "import sys, verl.single_controller, verl.single_controller.local; "
        "assert 'ray' not in sys.modules, 'ray was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
