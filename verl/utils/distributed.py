"""torch.distributed set-up that keeps a single-machine run on loopback.

``MASTER_ADDR`` says where the ranks meet. When it is a loopback address (127.0.0.1, ``::1``, ``localhost``: what
the backends choose when Ray keeps to loopback, see :mod:`verl.single_controller.ray.cluster`), every rank is on this
machine and nothing needs to listen on the network, but two parts of torch.distributed would still do so:

* the rendezvous ``TCPStore`` that rank 0 serves binds the wildcard address (``::``/``0.0.0.0``) whatever
  ``MASTER_ADDR`` is; :func:`init_process_group_from_env` hands it a socket already bound to ``MASTER_ADDR``
  (``TCPStore(master_listen_fd=...)``, the hook torchelastic uses);
* gloo and NCCL open their own listening sockets on the interface they pick (gloo: the address the host name
  resolves to; NCCL: the first non-loopback interface). :func:`apply_loopback_network_env` points them at the
  loopback interface through their documented variables (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``) and tells
  vLLM its host IP (``VLLM_HOST_IP``), unless the user set those.

A non-loopback ``MASTER_ADDR`` (a multi-node run, or a single machine opened on purpose) goes through the plain
``env://`` rendezvous, untouched.
"""

from __future__ import annotations

import atexit
import datetime
import ipaddress
import os
import socket
from collections.abc import MutableMapping

# environment variables that pick the interface of gloo / NCCL sockets and vLLM's idea of this host's IP
LOOPBACK_NETWORK_ENV_KEYS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "VLLM_HOST_IP")


def is_loopback_host(host: str | None) -> bool:
    """Whether ``host`` names this machine's loopback: ``localhost``, ``127.0.0.0/8``, ``::1`` or an IPv4-mapped
    loopback (``::ffff:127.0.0.1``); brackets around an IPv6 literal are allowed. Host names other than
    ``localhost`` are not resolved (a name is taken as a network address)."""
    if not host:
        return False
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def loopback_interface(host: str = "127.0.0.1") -> str:
    """The name of the network interface holding ``host`` (``lo`` on Linux), for ``GLOO_SOCKET_IFNAME`` /
    ``NCCL_SOCKET_IFNAME``. Falls back to ``lo`` when psutil is missing or no interface matches."""
    host = "127.0.0.1" if host.strip("[]").lower() == "localhost" else host.strip("[]")
    try:
        import psutil
    except ImportError:
        return "lo"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            if addr.family == family and addr.address.split("%")[0] == host:
                return name
    return "lo"


def apply_loopback_network_env(master_addr: str | None, env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """When ``master_addr`` is loopback, set ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` to the loopback
    interface and ``VLLM_HOST_IP`` to ``master_addr`` in ``env`` (default ``os.environ``), leaving any the user set.

    Returns the variables it set (empty for a network address). Must run before the first gloo/NCCL group or vLLM
    engine of the process is created: they read these variables when they open their sockets.
    """
    target = os.environ if env is None else env
    if not is_loopback_host(master_addr):
        return {}
    addr = str(master_addr).strip("[]")
    ip = "127.0.0.1" if addr.lower() == "localhost" else addr
    iface = loopback_interface(ip)
    wanted = {"GLOO_SOCKET_IFNAME": iface, "NCCL_SOCKET_IFNAME": iface, "VLLM_HOST_IP": ip}
    applied = {k: v for k, v in wanted.items() if not target.get(k)}
    target.update(applied)
    return applied


def _loopback_store(addr: str, port: int, rank: int, world_size: int, timeout: datetime.timedelta):
    """The rendezvous ``TCPStore``: rank 0 serves it on a socket bound to ``addr`` only, the others connect."""
    import torch.distributed as dist

    host = "127.0.0.1" if addr.lower() == "localhost" else addr
    if rank != 0:
        return dist.TCPStore(host, port, world_size, False, timeout=timeout)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(max(128, world_size))
    except OSError as err:
        sock.close()
        raise RuntimeError(
            f"rank 0 could not serve the rendezvous on MASTER_ADDR={addr} MASTER_PORT={port}: {err}"
        ) from err
    # the store owns the descriptor from here on (detach: the Python object must not close it)
    return dist.TCPStore(
        host, port, world_size, True, timeout=timeout, wait_for_workers=False, master_listen_fd=sock.detach()
    )


def init_process_group_from_env(backend: str, timeout_s: float = 1800.0) -> None:
    """``torch.distributed.init_process_group(backend)`` from torchrun's variables (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``), listening on loopback only when ``MASTER_ADDR`` is loopback.

    With a loopback ``MASTER_ADDR`` the gloo/NCCL interface variables are applied first and rank 0 serves the
    rendezvous store on ``MASTER_ADDR`` instead of every interface; otherwise this is the plain ``env://``
    rendezvous. Under torchrun (``TORCHELASTIC_USE_AGENT_STORE=True``) the launcher already serves the store, so
    only the interface variables apply.
    """
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    addr = os.environ.get("MASTER_ADDR", "")
    apply_loopback_network_env(addr)  # a no-op unless MASTER_ADDR is loopback
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    if not is_loopback_host(addr) or agent_store or not os.environ.get("MASTER_PORT"):
        dist.init_process_group(
            backend=backend, init_method="env://", rank=rank, world_size=world_size, timeout=timeout
        )
    else:
        store = _loopback_store(addr.strip("[]"), int(os.environ["MASTER_PORT"]), rank, world_size, timeout)
        # the prefix env:// adds too, so keys of this group never collide with other users of the store
        dist.init_process_group(
            backend=backend,
            store=dist.PrefixStore("default_pg", store),
            rank=rank,
            world_size=world_size,
            timeout=timeout,
        )
    atexit.register(destroy_process_group_at_exit)


def destroy_process_group_at_exit() -> None:
    """Destroy the default process group if it still exists (registered at exit by
    :func:`init_process_group_from_env`). A group left to the interpreter's teardown lets gloo's threads be destroyed
    while joinable (``terminate called without an active exception``, a non-zero exit after a finished run) and
    NCCL warns that its communicators leaked; no collective is issued, so a peer that already died cannot hang it."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


__all__ = [
    "LOOPBACK_NETWORK_ENV_KEYS",
    "apply_loopback_network_env",
    "destroy_process_group_at_exit",
    "init_process_group_from_env",
    "is_loopback_host",
    "loopback_interface",
]
