"""The driver's handle on one rollout replica, in the two places a replica can run.

* :class:`ProcessReplica`: a process the driver spawns on its own machine (the trainer's rank runs in the driver:
  ``trainer.backend`` resolves to ``local``). Its channels are multiprocessing queues; a replica that dies is seen
  through its exit code.
* :class:`RayReplica`: a Ray actor on a bundle of the rollout pool's placement groups (the trainer's ranks are Ray
  actors; the pool may span ``rollout.nnodes`` machines). :class:`RolloutReplicaHost` runs the same loop in a
  thread of the actor, with thread queues as its channels; a replica that dies is seen through Ray's actor error.

Both run :func:`~verl.trainer.fully_async_policy.rollout_process.rollouter_main` and answer the same calls:
:meth:`Replica.put_request`, :meth:`Replica.put_sync`, :meth:`Replica.get` (waits, and names the replica and what
the trainer was doing when it died), :meth:`Replica.close`.
"""

from __future__ import annotations

import os
import pickle
import queue
import threading
import time
from typing import Any

from verl.trainer.fully_async_policy.rollout_process import POLL_S, STOP, rollouter_main

__all__ = ["ProcessReplica", "RayReplica", "Replica", "RolloutReplicaHost", "RolloutWorkerError"]

RAY_POLL_S = 0.5  # how long one remote read waits inside a Ray replica (a round trip per read, not per item)
STOP_TIMEOUT_S = 10.0  # how long a replica gets to finish its batch and exit before it is killed


class RolloutWorkerError(RuntimeError):
    """The rollout worker process died or failed; the run stops instead of waiting for rollouts that never come."""


class _ReplicaGone(Exception):
    """The replica stopped answering (its process exited, its actor died, its loop ended)."""


class Replica:
    """What the rollouter asks of a replica; subclasses say how a message travels and how death shows."""

    def __init__(self, index: int) -> None:
        self.index = index

    # -------------------------------------------------------------------------------------------- transport
    def put_request(self, item: bytes) -> None:
        """Queue one pickled request ``(kind, *payload)`` (:mod:`~verl.trainer.fully_async_policy.rollout_process`)."""
        raise NotImplementedError

    def put_sync(self, version: int) -> None:
        """Announce weight push ``version``: the replica takes it between two batches (or at once, mid-batch, with
        partial rollouts) by joining the trainer's broadcast."""
        raise NotImplementedError

    def _take(self, acks: bool) -> Any:
        """The next message (of the results, or of the acks channel), or None after a poll interval with none;
        raises :class:`_ReplicaGone` when the replica cannot send any more."""
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def wait_exit(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for a replica that is going down to be gone (a peer's socket closes before
        the process is reaped)."""
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(POLL_S)

    def describe(self) -> str:
        """``rollout worker 1 (pid 1234)``, with the node where that is not this machine."""
        raise NotImplementedError

    def death(self) -> str:
        """How the replica ended, for the error message."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------------ reads
    def dead_error(self, doing: str) -> RolloutWorkerError:
        return RolloutWorkerError(
            f"the {self.describe()} {self.death()} while the trainer was {doing}; see its log above for the cause"
        )

    def get(self, doing: str, acks: bool = False) -> Any:
        """The next message of the replica (a result, ``"ready"``, or with ``acks`` a push report), waiting for it.

        Raises:
            RolloutWorkerError: the replica died (naming it and ``doing``) or reported an exception.
        """
        while True:
            try:
                item = self._take(acks)
            except _ReplicaGone as err:
                raise self.dead_error(doing) from err
            if item is None:
                continue
            if isinstance(item, bytes):
                item = pickle.loads(item)  # noqa: S301 - written by our own rollout replica
            if isinstance(item, tuple) and item and item[0] == "error":
                raise RolloutWorkerError(f"the {self.describe()} failed:\n{item[1]}")
            return item


class ProcessReplica(Replica):
    """A rollout replica in a process spawned by the driver (``CUDA_VISIBLE_DEVICES``: the device it gets)."""

    def __init__(self, ctx: Any, index: int, max_outstanding: int, check_weight_sync: bool) -> None:
        super().__init__(index)
        self.requests: Any = ctx.Queue()
        self.results: Any = ctx.Queue(maxsize=max_outstanding)
        self.syncs: Any = ctx.Queue()
        self.sync_pending = ctx.Event()
        # rollout.check_weight_sync: after each push the process reports the digests of what its engine holds
        self.acks: Any = ctx.Queue() if check_weight_sync else None
        self.process: Any = None
        self._ctx = ctx

    def start(self, container: dict[str, Any], wire: tuple, partial_rollout: bool, gpu: str | None) -> None:
        self.process = self._ctx.Process(
            target=rollouter_main,
            args=(container, wire, self.requests, self.results, self.syncs, self.sync_pending, os.getpid()),
            kwargs={"partial_rollout": bool(partial_rollout), "acks": self.acks},
            name=f"verl-rollouter-{self.index}",
            daemon=True,
        )
        saved = os.environ.get("CUDA_VISIBLE_DEVICES")
        if gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # the child reads it at start; the driver's own is restored
        try:
            self.process.start()
        finally:
            if gpu is not None:
                if saved is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = saved

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def put_request(self, item: bytes) -> None:
        self.requests.put(item)

    def put_sync(self, version: int) -> None:
        self.syncs.put(int(version))
        self.sync_pending.set()

    def _take(self, acks: bool) -> Any:
        try:
            return (self.acks if acks else self.results).get(timeout=POLL_S)
        except queue.Empty:
            if not self.alive():
                raise _ReplicaGone("exited") from None
            return None
        except (OSError, EOFError) as err:  # the queue's other end went away mid-message
            raise _ReplicaGone("its queue closed") from err

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def describe(self) -> str:
        return f"rollout worker {self.index} (pid {self.pid})"

    def death(self) -> str:
        code = self.process.exitcode if self.process is not None else None
        return f"exited with code {code}"

    def close(self) -> None:
        """Stop the process (politely, then by force) and close its queues."""
        if self.alive():
            self.requests.put(STOP)
            self.process.join(timeout=STOP_TIMEOUT_S)
        if self.alive():
            self.process.kill()
            self.process.join(timeout=5)
        for q in (self.requests, self.results, self.syncs, self.acks):
            if q is None:
                continue
            q.cancel_join_thread()
            q.close()


class RolloutReplicaHost:
    """The body of a Ray rollout replica: :func:`rollouter_main` in a thread, fed through thread queues, so the
    actor keeps answering (a new request, a push announcement, a read) while the thread generates.
    ``engine_pool``: a tensor-parallel replica's bundles, where its engine's worker group goes."""

    def __init__(
        self,
        container: dict[str, Any],
        wire: tuple,
        partial_rollout: bool,
        check_weight_sync: bool,
        max_outstanding: int,
        engine_pool: Any = None,
    ) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue(maxsize=max_outstanding)
        self.syncs: queue.Queue = queue.Queue()
        self.sync_pending = threading.Event()
        self.acks: queue.Queue | None = queue.Queue() if check_weight_sync else None
        self.thread = threading.Thread(
            target=rollouter_main,
            args=(container, wire, self.requests, self.results, self.syncs, self.sync_pending, None),
            kwargs={"partial_rollout": bool(partial_rollout), "acks": self.acks, "pool": engine_pool},
            name="verl-rollouter",
            daemon=True,
        )
        self.thread.start()

    def where(self) -> tuple[str, int]:
        """``(node IP, pid)`` of this actor."""
        import ray

        return ray.util.get_node_ip_address(), os.getpid()

    def put_request(self, item: bytes) -> None:
        self.requests.put(item)

    def put_sync(self, version: int) -> None:
        self.syncs.put(int(version))
        self.sync_pending.set()

    def take(self, acks: bool, timeout: float) -> tuple[Any, bool]:
        """``(message or None, whether the loop still runs)``, waiting up to ``timeout`` s for a message."""
        try:
            return (self.acks if acks else self.results).get(timeout=timeout), True
        except queue.Empty:
            return None, self.thread.is_alive()

    def running(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout: float) -> bool:
        """Ask the loop to end after its current batch; whether it ended within ``timeout`` s."""
        self.requests.put(STOP)
        self.thread.join(timeout=timeout)
        return not self.thread.is_alive()


class RayReplica(Replica):
    """A rollout replica whose loop runs in a Ray actor, on slot ``(group, start)`` of the rollout pool (``pool``,
    :func:`~verl.trainer.fully_async_policy.placement.rollout_pool`).

    One device (``ranks == 1``): the actor takes bundle ``start`` of the node's group (Ray gives it the bundle's GPU:
    ``CUDA_VISIBLE_DEVICES`` inside) and runs the engine itself. A tensor-parallel replica (``ranks > 1``): the
    actor holds nothing and drives a worker group on bundles ``start .. start + ranks - 1``, one engine over them.
    """

    def __init__(self, index: int, max_outstanding: int, check_weight_sync: bool, pool: Any, ranks: int = 1) -> None:
        super().__init__(index)
        self.max_outstanding = max_outstanding
        self.check_weight_sync = check_weight_sync
        self.pool = pool
        self.ranks = int(ranks)
        self.actor: Any = None
        self.node_ip = "?"
        self.pid: int | None = None
        self._gone: str | None = None

    def start(self, container: dict[str, Any], wire: tuple, partial_rollout: bool, group: int, start: int) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        args = (container, wire, partial_rollout, self.check_weight_sync, self.max_outstanding)
        if self.ranks == 1:
            pg = self.pool.get_placement_groups()[group]
            strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=start)
            options = {**self.pool.actor_resources(), "scheduling_strategy": strategy}
            engine_pool = None
        else:  # the engine's ranks take the bundles; the driving actor needs no resources of its own
            options = {"num_cpus": 0, "num_gpus": 0}
            engine_pool = self.pool.slice(group, start, self.ranks, name_prefix=f"rollout_replica{self.index}")
        # a read waits on one thread of the actor while the others take requests and push announcements
        host = ray.remote(RolloutReplicaHost).options(**options, max_concurrency=4)
        self.actor = host.remote(*args, engine_pool)
        try:
            self.node_ip, self.pid = ray.get(self.actor.where.remote())
        except ray.exceptions.RayError as err:
            self._gone = f"could not start ({type(err).__name__}: {err})"
            raise self.dead_error("starting it") from err

    def _call(self, method: str, *args: Any) -> Any:
        import ray

        if self._gone is not None:
            raise _ReplicaGone(self._gone)
        try:
            return ray.get(getattr(self.actor, method).remote(*args))
        except ray.exceptions.RayActorError as err:
            self._gone = f"died ({type(err).__name__})"
            raise _ReplicaGone(self._gone) from err

    def put_request(self, item: bytes) -> None:
        try:
            self._call("put_request", item)
        except _ReplicaGone as err:
            raise self.dead_error("submitting prompts") from err

    def put_sync(self, version: int) -> None:
        try:
            self._call("put_sync", int(version))
        except _ReplicaGone as err:
            raise self.dead_error("pushing weights") from err

    def _take(self, acks: bool) -> Any:
        item, running = self._call("take", acks, RAY_POLL_S)
        if item is None and not running:
            self._gone = "ended its loop without a report"
            raise _ReplicaGone(self._gone)
        return item

    def alive(self) -> bool:
        try:
            return bool(self._call("running"))
        except _ReplicaGone:
            return False

    def describe(self) -> str:
        ranks = f", an engine over {self.ranks} ranks" if self.ranks > 1 else ""
        return f"rollout worker {self.index} (pid {self.pid} on node {self.node_ip}{ranks})"

    def death(self) -> str:
        return self._gone or "died"

    def close(self) -> None:
        """Stop the loop (politely, then by force) and end the actor."""
        import ray

        if self.actor is None:
            return
        if self._gone is None:
            try:
                ray.get(self.actor.stop.remote(STOP_TIMEOUT_S), timeout=STOP_TIMEOUT_S + 5)
            except ray.exceptions.RayError:
                pass  # going away anyway
        ray.kill(self.actor)
        self.actor = None
