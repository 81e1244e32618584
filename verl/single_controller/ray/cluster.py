"""Start a local Ray that listens on loopback only, or join a cluster when the user names one.

Every place in verl that starts Ray goes through :func:`start_or_join_ray` (``runner.init_ray`` for a run,
``create_worker_group`` for the Python API, the test fixtures), so this is the one place that decides what Ray
listens on.

What Ray does by itself on Linux: a new local instance takes the machine's network address as its node IP, its GCS,
raylets, workers and agents listen on every interface and dial each other through that address. ``ray.init``'s
``_node_ip_address="127.0.0.1"`` does not change that: Ray replaces a loopback node IP with the network one
(``services.resolve_ip_for_localhost``). The switch Ray reads is ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``: with ``0``
the node IP is 127.0.0.1 and the GCS, raylets, workers, runtime-env and metrics agents bind 127.0.0.1 only (what Ray
does on macOS and Windows by default). Ray reads it in two places: in every process it starts (so it must be in
``os.environ`` before ``ray.init``, and the workers inherit it from the raylet) and in the driver when
``ray._private.ray_constants`` is first imported, which may have happened already; that module constant is kept in
step here.

The rules:

* no ``address`` (or ``"local"``) and no ``$RAY_ADDRESS``: a new local Ray on 127.0.0.1, even when a cluster started
  with ``ray start`` runs on this machine (plain ``ray.init()`` would join that one: joining is explicit here);
* ``address`` (``"auto"``, ``"host:port"``, ``"ray://..."``) or ``$RAY_ADDRESS``: Ray's normal addressing;
* ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1`` set by the user: a local Ray opened to the network on purpose (never
  overridden).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
from typing import Any

from verl.utils.distributed import is_loopback_host
from verl.utils.errors import ConfigLineError

logger = logging.getLogger(__name__)

# Ray's switch between "clusters enabled" (node IP = network address) and loopback-only (ray_constants.py)
RAY_CLUSTER_ENV_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# an address that means "start a new local instance" to ray.init
LOCAL_ADDRESS = "local"

# True while the variable in os.environ is verl's (not the user's), so joining a cluster later can take it back
_SET_BY_VERL = False


def _platform_default() -> bool:
    # Ray's default: clusters on Linux, loopback on macOS and Windows
    return sys.platform not in ("darwin", "win32")


def _clusters_enabled() -> bool:
    """Ray's reading of the switch (``ray._common.utils.env_bool``: "1"/"true" enable, anything else disables)."""
    raw = os.environ.get(RAY_CLUSTER_ENV_VAR)
    if raw is None:
        return _platform_default()
    return raw.lower() in ("1", "true")


def _sync_ray_constant() -> None:
    """Make an already imported ``ray._private.ray_constants`` agree with the environment (it is read at import)."""
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = _clusters_enabled()


def requested_cluster(address: str | None = None) -> str | None:
    """The cluster ``ray.init(address=address)`` is asked to join: ``address`` unless it is ``"local"``, else
    ``$RAY_ADDRESS`` (unless empty or ``"local"``); ``None`` means "start a new local Ray"."""
    for candidate in (address, os.environ.get("RAY_ADDRESS")):
        if candidate:
            return None if str(candidate) == LOCAL_ADDRESS else str(candidate)
    return None


def _address_host(address: str) -> str:
    """The host of ``host:port`` / ``ray://host:port`` (``""`` for ``"auto"`` and other bare words)."""
    rest = address.split("://", 1)[-1]
    if ":" not in rest:
        return ""
    return rest.rsplit(":", 1)[0].strip("[]")


def keep_ray_on_loopback() -> bool:
    """Make the next local Ray this process starts (``ray.init``, ``ray.cluster_utils.Cluster``) keep to 127.0.0.1.

    Sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` in ``os.environ`` unless the user set the variable (their value
    wins), and updates Ray's constant if Ray is already imported. Returns whether Ray will stay on loopback.
    """
    global _SET_BY_VERL
    if RAY_CLUSTER_ENV_VAR not in os.environ:
        os.environ[RAY_CLUSTER_ENV_VAR] = "0"
        _SET_BY_VERL = True
    _sync_ray_constant()
    return not _clusters_enabled()


def _release_loopback() -> None:
    """Before joining a cluster on the network: undo verl's own setting, so the driver reports its network address
    to the cluster (a user's setting stays)."""
    global _SET_BY_VERL
    if _SET_BY_VERL and os.environ.get(RAY_CLUSTER_ENV_VAR) == "0":
        del os.environ[RAY_CLUSTER_ENV_VAR]
        _sync_ray_constant()
    _SET_BY_VERL = False


PY_EXECUTABLE_KEY = "ray_kwargs.ray_init.runtime_env.py_executable"


def py_executable_problem(py_executable: str | None, cwd: str | None = None) -> str | None:
    """Why Ray could start no worker with ``runtime_env.py_executable`` on this machine, in one line naming the
    config key; None when it can (or is unset).

    Ray starts every worker through that command and retries a failing one for minutes before its error says
    why. Upstream v0.9's launch scripts set it to ``uv -v run --frozen ...`` unless ``VERL_USE_UV=0``. Checked: the
    program is on ``PATH``, and ``uv run --frozen`` finds a ``uv.lock`` in ``cwd`` (default: the working directory)
    or a directory above it, as uv looks for one."""
    if not py_executable:
        return None
    words = shlex.split(str(py_executable))
    instead = f"run upstream's scripts with VERL_USE_UV=0, or set {PY_EXECUTABLE_KEY}=null (the driver's Python)"
    if not words or shutil.which(words[0]) is None:
        program = words[0] if words else ""
        where = f"{PY_EXECUTABLE_KEY}={py_executable!r}"
        return f"{where}: {program!r} is not on PATH, so no Ray worker could start; {instead}"
    if os.path.basename(words[0]) == "uv" and "run" in words and "--frozen" in words:
        start = os.path.abspath(cwd or os.getcwd())
        here = start
        while not os.path.isfile(os.path.join(here, "uv.lock")):
            if os.path.dirname(here) == here:
                return (
                    f"{PY_EXECUTABLE_KEY}={py_executable!r}: `uv run --frozen` needs a uv.lock and there is none in "
                    f"{start} or above (this project ships none); {instead}"
                )
            here = os.path.dirname(here)
    return None


WORKER_NICENESS_ENV = "RAY_worker_niceness"  # Ray's own setting of its workers' niceness (default 15)


def start_or_join_ray(**init_kwargs: Any) -> bool:
    """``ray.init(**init_kwargs)`` that starts a local Ray on loopback unless a cluster is named.

    With no ``address`` (or ``"local"``) and no ``$RAY_ADDRESS`` a new local instance is started with
    ``address="local"`` after :func:`keep_ray_on_loopback`, its workers at niceness 0 (Ray's default is 15);
    otherwise Ray joins the named cluster as usual. A no-op
    when Ray is already initialised. Returns True when this call started a local Ray.
    """
    import ray

    if ray.is_initialized():
        return False
    kwargs = dict(init_kwargs)
    cluster = requested_cluster(kwargs.get("address"))
    if cluster is not None:
        if not is_loopback_host(_address_host(cluster)):
            _release_loopback()  # a cluster on loopback (``Cluster`` in tests, a local ``ray start``) keeps it
        ray.init(**kwargs)
        logger.info("Ray: joined the cluster at %s", cluster)
        return False
    # a joined cluster's workers start on other machines, whose PATH this one cannot see
    problem = py_executable_problem(dict(kwargs.get("runtime_env") or {}).get("py_executable"))
    if problem is not None:
        raise ConfigLineError(problem)
    loopback = keep_ray_on_loopback()
    kwargs["address"] = LOCAL_ADDRESS
    # Ray starts its workers at niceness 15, below every other process: on a busy machine (the rollout process of
    # fully-async training, a reward worker, another job) the trainer's actors then get almost no CPU. A local Ray
    # started here runs them at the driver's priority; RAY_worker_niceness or the caller's _system_config win.
    if WORKER_NICENESS_ENV not in os.environ:
        kwargs["_system_config"] = {"worker_niceness": 0, **dict(kwargs.get("_system_config") or {})}
    ray.init(**kwargs)
    if loopback:
        logger.info("Ray: started a local instance listening on 127.0.0.1 only")
    else:
        logger.warning(
            "Ray: started a local instance that listens on the network (%s=%s is set)",
            RAY_CLUSTER_ENV_VAR,
            os.environ.get(RAY_CLUSTER_ENV_VAR),
        )
    return True


__all__ = [
    "LOCAL_ADDRESS",
    "RAY_CLUSTER_ENV_VAR",
    "keep_ray_on_loopback",
    "py_executable_problem",
    "requested_cluster",
    "start_or_join_ray",
]
