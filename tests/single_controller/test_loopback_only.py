"""Nothing a single-machine run opens listens beyond loopback unless the user asks.

* end to end: ``python -m verl.trainer.main_ppo`` on the Ray backend with 2 ranks (a tiny model, 1 step) in a fresh
  interpreter whose environment holds none of the switches (no ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, no
  ``RAY_ADDRESS``, no ``GLOO_SOCKET_IFNAME``); while it runs, the listening TCP sockets of every process of the run
  (the driver's process tree, plus any process whose command line names the run's Ray temp dir, in case Ray
  daemonizes one) are sampled, and every address must be 127.0.0.1 / ::1. The product path is what is tested: the
  guard in ``tests/conftest.py`` is removed from the child's environment.
* the pieces: which addresses mean "join a cluster", that a user's explicit setting of the Ray switch wins, and
  that the torch.distributed rendezvous store of a loopback ``MASTER_ADDR`` binds loopback only (torch's own
  ``env://`` store binds every interface).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")
pytest.importorskip("ray")

REPO_ROOT = Path(__file__).resolve().parents[2]
# environment a user's shell might carry that would change what the run listens on: the child gets none of them
NETWORK_ENV = (
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
    "RAY_ADDRESS",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "VLLM_HOST_IP",
    "MASTER_ADDR",
    "MASTER_PORT",
)
REWARD_SOURCE = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n    return 0.5\n"


def _loopback(ip: str) -> bool:
    """127.0.0.0/8, ::1 and IPv4-mapped loopback (what an IPv6 socket bound to 127.0.0.1 reports)."""
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or (mapped is not None and mapped.is_loopback)


def _run_processes(root_pid: int, marker: str) -> dict[int, psutil.Process]:
    """The driver, its descendants, and any process whose command line mentions ``marker`` (the Ray temp dir)."""
    procs: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(root_pid)
        procs[root.pid] = root
        for child in root.children(recursive=True):
            procs[child.pid] = child
    except psutil.NoSuchProcess:
        return procs
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in arg for arg in proc.info["cmdline"] or []):
                procs[proc.pid] = proc
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return procs


def _listeners(procs: dict[int, psutil.Process]) -> dict[tuple[str, int], str]:
    """(address, port) -> name of the process listening on it, over ``procs``."""
    found: dict[tuple[str, int], str] = {}
    for proc in procs.values():
        try:
            name = proc.name()
            conns = proc.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        for conn in conns:
            if conn.status == psutil.CONN_LISTEN:
                found[(conn.laddr.ip, conn.laddr.port)] = name
    return found


def run_and_watch(args: list[str], env: dict[str, str], marker: str, timeout_s: float = 240.0):
    """Run ``args``; sample the listening sockets of its processes until it exits. Returns (proc, listeners)."""
    seen: dict[tuple[str, int], str] = {}
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(args, env=env, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout_s
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the run did not finish in {timeout_s:.0f}s")
                seen.update(_listeners(_run_processes(proc.pid, marker)))
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        log = out.read()
    return proc.returncode, log, seen


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NETWORK_ENV}
    env.update(
        {
            "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            # Ray's memory monitor counts the whole shared machine; a killed worker would be a false failure
            "RAY_memory_monitor_refresh_ms": "0",
            **extra,
        }
    )
    return env


@pytest.mark.slow
def test_two_rank_ray_run_listens_on_loopback_only(tiny_model_dir: str, tmp_path: Path) -> None:
    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet

    train, _ = generate_arithmetic_splits(train_size=4, test_size=0, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    (tmp_path / "reward.py").write_text(REWARD_SOURCE)
    # a short temp dir of its own (Ray's unix socket paths must stay under 107 bytes) that names this run
    ray_tmp = tempfile.mkdtemp(prefix="vlb")
    args = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        f"data.train_files={tmp_path / 'train.parquet'}",
        "data.val_files=null",
        f"custom_reward_function.path={tmp_path / 'reward.py'}",
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "trainer.backend=ray",
        "trainer.n_gpus_per_node=2",
        "trainer.device=cpu",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        "trainer.export_hf=false",
        "trainer.plot=false",
        "trainer.torch_threads=1",
        f"trainer.default_local_dir={tmp_path / 'run'}",
        "ray_kwargs.ray_init.num_cpus=2",
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS=1",
    ]
    try:
        rc, log, seen = run_and_watch(args, _clean_env(), marker=ray_tmp)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert rc == 0, log[-4000:]
    names = set(seen.values())
    # the sampling saw the run: Ray's GCS and raylet and the ranks (their gRPC servers, rank 0's rendezvous store)
    assert {"gcs_server", "raylet"} <= names, f"Ray's servers were not seen listening: {sorted(names)}"
    assert any(name.startswith("ray::") for name in names), f"no Ray worker was seen listening: {sorted(names)}"
    exposed = sorted(f"{name} on {ip}:{port}" for (ip, port), name in seen.items() if not _loopback(ip))
    assert not exposed, f"listening beyond loopback: {exposed}"


# ---------------------------------------------------------------------------------------------------- pieces
def _unset(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """Remove ``key`` from os.environ and have it removed again after the test even if the code under test sets
    it (``delenv`` of an absent key records nothing to undo)."""
    monkeypatch.setenv(key, "")
    monkeypatch.delenv(key)


def test_joining_a_cluster_is_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.single_controller.ray.cluster import requested_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert requested_cluster(None) is None and requested_cluster("local") is None
    assert requested_cluster("auto") == "auto" and requested_cluster("10.0.0.5:6379") == "10.0.0.5:6379"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert requested_cluster(None) == "10.0.0.5:6379"
    assert requested_cluster("local") is None  # an explicit "local" beats the environment
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert requested_cluster(None) is None


def test_loopback_switch_respects_the_users_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._private.ray_constants as ray_constants

    from verl.single_controller.ray import cluster

    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)  # as imported without the variable on Linux
    monkeypatch.setattr(cluster, "_SET_BY_VERL", False)
    _unset(monkeypatch, cluster.RAY_CLUSTER_ENV_VAR)
    assert cluster.keep_ray_on_loopback() is True
    assert os.environ[cluster.RAY_CLUSTER_ENV_VAR] == "0" and ray_constants.ENABLE_RAY_CLUSTER is False
    cluster._release_loopback()  # joining a cluster later: verl's own setting is taken back
    assert cluster.RAY_CLUSTER_ENV_VAR not in os.environ and ray_constants.ENABLE_RAY_CLUSTER is (
        sys.platform not in ("darwin", "win32")
    )

    monkeypatch.setenv(cluster.RAY_CLUSTER_ENV_VAR, "1")  # opened to the network on purpose: never overridden
    assert cluster.keep_ray_on_loopback() is False
    assert os.environ[cluster.RAY_CLUSTER_ENV_VAR] == "1" and ray_constants.ENABLE_RAY_CLUSTER is True
    cluster._release_loopback()
    assert os.environ[cluster.RAY_CLUSTER_ENV_VAR] == "1"


def test_loopback_hosts_and_network_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.utils.distributed import apply_loopback_network_env, is_loopback_host

    for host in ("127.0.0.1", "127.0.1.1", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"):
        assert is_loopback_host(host), host
    for host in ("", None, "0.0.0.0", "::", "10.0.0.5", "node-3", "fe80::1"):
        assert not is_loopback_host(host), host

    env: dict[str, str] = {"NCCL_SOCKET_IFNAME": "ib0"}  # the user's choice stays
    applied = apply_loopback_network_env("127.0.0.1", env)
    assert env["NCCL_SOCKET_IFNAME"] == "ib0" and "NCCL_SOCKET_IFNAME" not in applied
    assert env["GLOO_SOCKET_IFNAME"] == applied["GLOO_SOCKET_IFNAME"] and env["VLLM_HOST_IP"] == "127.0.0.1"
    psutil_ifaces = psutil.net_if_addrs()
    assert any(a.address == "127.0.0.1" for a in psutil_ifaces[env["GLOO_SOCKET_IFNAME"]])
    assert apply_loopback_network_env("10.0.0.5", other := {}) == {} and other == {}  # multi-node: untouched


def test_rendezvous_store_of_a_loopback_master_binds_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    from verl.single_controller.base.worker import find_free_port
    from verl.utils.distributed import init_process_group_from_env

    port = find_free_port()
    for key in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "VLLM_HOST_IP", "TORCHELASTIC_USE_AGENT_STORE"):
        _unset(monkeypatch, key)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    init_process_group_from_env("gloo", timeout_s=30)
    try:
        listening = [c.laddr for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        store = [a for a in listening if a.port == port]
        assert store, f"the rendezvous store is not listening on {port}: {listening}"
        assert all(_loopback(a.ip) for a in listening), listening
        assert os.environ["GLOO_SOCKET_IFNAME"]  # applied before gloo opened its sockets
    finally:
        dist.destroy_process_group()


def test_the_process_group_is_destroyed_at_exit(tmp_path) -> None:
    """A process that joined a group and returns without destroying it has it destroyed at exit (before the
    interpreter's teardown, where gloo's joinable threads call std::terminate)."""
    import subprocess
    import sys

    from verl.single_controller.base.worker import find_free_port

    script = tmp_path / "run.py"
    script.write_text(
        "import atexit, os\n"
        "import torch.distributed as dist\n"
        "from verl.utils.distributed import init_process_group_from_env\n"
        "atexit.register(lambda: print('initialized at exit:', dist.is_initialized()))  # runs last (LIFO)\n"
        "init_process_group_from_env('gloo', timeout_s=30)\n"
        "print('initialized:', dist.is_initialized())\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHELASTIC_USE_AGENT_STORE",)}
    env.update(PYTHONPATH=root, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(find_free_port()), RANK="0", WORLD_SIZE="1")
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:2] == ["initialized: True", "initialized at exit: False"], run.stdout
