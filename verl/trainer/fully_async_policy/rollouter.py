"""The rollouter: rollout replicas that turn prompt batches into rollouts while the trainer trains.

:class:`Rollouter` starts the rollout replicas (``rollout.nnodes * rollout.n_gpus_per_node`` devices, in replicas of
``tensor_model_parallel_size`` devices with one engine and copy of the policy each:
:mod:`verl.trainer.fully_async_policy.rollout_process`), splits each prompt batch over them
(:meth:`Rollouter.submit`), reads the finished rollouts in submission order (:meth:`Rollouter.next_result`),
answers the trainer's own generation calls (validation: :meth:`Rollouter.generate`, split the same way) and
pushes new weights (:meth:`Rollouter.push_weights`) from the trainer's rank 0 over the one weight-transfer path
(:class:`~verl.workers.rollout.weight_transfer.WeightTransferGroup`: gloo on CPU, NCCL on GPU). Where the replicas
run (processes on the driver's machine, or Ray actors on the rollout pool's nodes) and which wire they use:
:mod:`verl.trainer.fully_async_policy.placement` and :mod:`verl.trainer.fully_async_policy.replicas`.

Every row carries ``rollout_weight_version`` (the version of the weights its generation started with: a partial
rollout continued after a sync is as old as its oldest part) and ``rollout_weight_version_last``. Versions count
pushes: version ``v`` is the trainer's weights after its ``v``-th push (0: the initial weights).

A replica that dies (killed, out of memory, an exception, a lost node) is found within a poll interval: the driver
raises :class:`RolloutWorkerError` naming the replica and how it ended instead of waiting forever; a spawned process
exits when the driver process is gone, and Ray ends its actors with their owner.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import pickle
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from verl.protocol import DataProto
from verl.trainer.fully_async_policy.placement import place_rollouter, rollout_replicas, rollout_tp
from verl.trainer.fully_async_policy.replicas import ProcessReplica, RayReplica, Replica, RolloutWorkerError
from verl.trainer.fully_async_policy.rollout_process import GENERATE, ROLLOUTS
from verl.utils.seeding import replica_seed

logger = logging.getLogger(__name__)

__all__ = ["Rollouter", "RolloutWorkerError"]


class Rollouter:
    """The driver's handle on the rollout replicas: ``rollout.nnodes * rollout.n_gpus_per_node`` devices over
    ``actor_rollout_ref.rollout.tensor_model_parallel_size`` each (:mod:`verl.trainer.fully_async_policy.placement`).

    Each prompt batch is split over the replicas and its parts are read back in order, batch after batch in
    submission order, so the data order (and a resumed run's) does not depend on which replica finishes first.
    One push reaches every replica.

    Args:
        config: the full PPO config (``actor_rollout_ref`` builds the engine; ``trainer.device`` picks the backend;
            ``rollout.nnodes * rollout.n_gpus_per_node`` is the number of replicas).
        actor_group: the trainer's actor worker group, whose rank 0 sends the weights
            (``init_weight_sender`` / ``send_rollout_weights`` of ``ActorRolloutRefWorker``).
        max_outstanding: the most prompt batches submitted and not yet read.
        partial_rollout: stop unfinished responses at a weight sync and continue them with the new weights.
        pool: the rollout pool reserved in Ray (:func:`~verl.trainer.fully_async_policy.placement.rollout_pool`)
            when the trainer's ranks are Ray actors: the replicas become Ray actors on it, and it is released when
            the rollouter closes. None: processes on the driver's machine.
    """

    def __init__(
        self,
        config: DictConfig,
        actor_group: Any,
        max_outstanding: int,
        partial_rollout: bool = False,
        pool: Any = None,
    ) -> None:
        from verl.single_controller.base.worker import find_free_port
        from verl.utils.device import get_device_name

        self.device = get_device_name(config.trainer.device)
        self.max_outstanding = int(max_outstanding)
        count, self.ranks = rollout_replicas(config), rollout_tp(config)
        # a tensor-parallel engine holds shards, whose digests are not the full tensors': not read back (as in
        # synchronous training, docs/trust.md)
        self.check_weight_sync = bool(config.actor_rollout_ref.rollout.check_weight_sync) and self.ranks == 1
        self.placement = place_rollouter(self.device, actor_group, count, pool)
        self.replicas = self._make_replicas(count)
        host, port, backend = self.placement.host, find_free_port(), self.placement.backend
        container = OmegaConf.to_container(config, resolve=True)
        self.outstanding = 0
        self.version = 0
        self.served = [0] * count  # parts of batches each replica generated (read back)
        self._route: deque[tuple[int, ...]] = deque()  # the replicas of each batch in flight, oldest first
        # per replica: results of batches in flight read early (to reach a generation call's answer behind them)
        self._early: list[deque[DataProto]] = [deque() for _ in range(count)]
        self._submitted = 0
        self._actor_group = actor_group
        try:
            receivers = count * self.ranks  # every rank of every replica receives each push
            for replica, where in zip(self.replicas, self._where()):
                wire = (host, port, backend, 1 + replica.index * self.ranks, receivers)  # receiver ranks from 1
                replica.start(container, wire, partial_rollout, *where)
            for replica in self.replicas:
                item = replica.get("waiting for it to load the model")
                if item != "ready":
                    raise RolloutWorkerError(f"unexpected first message from the {replica.describe()}: {item!r}")
            actor_group.init_weight_sender(host, port, backend, receivers)
        except BaseException:
            self.close()
            raise

    def _make_replicas(self, count: int) -> list[Replica]:
        if self.placement.pool is None:
            ctx = mp.get_context("spawn")  # a fresh interpreter: no inherited torch threads, CUDA or locks
            return [ProcessReplica(ctx, i, self.max_outstanding, self.check_weight_sync) for i in range(count)]
        pool = self.placement.pool
        return [RayReplica(i, self.max_outstanding, self.check_weight_sync, pool, self.ranks) for i in range(count)]

    def _where(self) -> list[tuple[Any, ...]]:
        """Each replica's place: its ``CUDA_VISIBLE_DEVICES`` (processes), or its node group and first bundle (Ray)."""
        if self.placement.pool is None:
            return [(gpu,) for gpu in self.placement.cuda_visible_devices]
        return self.placement.slots(self.ranks)

    @property
    def pid(self) -> int | None:
        """The first replica's process id."""
        return self.replicas[0].pid

    def submit(self, prompts: DataProto, meta: dict[str, Any]) -> None:
        """Queue a prompt batch ``[bs, prompt_len]`` for ``rollout.n`` responses each, split over the replicas
        (:meth:`_put_parts`); ``meta`` is the generation call's ``meta_info`` (stop/pad ids, ``seed``)."""
        if self.outstanding >= self.max_outstanding:
            raise RuntimeError(f"more than {self.max_outstanding} prompt batches in flight: read results first")
        request = lambda part, seed: (ROLLOUTS, part, {**meta, "seed": seed})  # noqa: E731
        self._route.append(self._put_parts(prompts, request, meta.get("seed"), "submitting prompts"))
        self._submitted += 1
        self.outstanding += 1

    def next_result(self) -> DataProto:
        """The rollouts of the oldest submitted batch (``bs * n`` rows, its parts joined in order), waiting for
        them."""
        if self.outstanding == 0:
            raise RuntimeError("no prompt batch in flight")
        route = self._route[0]
        parts = []
        for index in route:
            early = self._early[index]
            parts.append(early.popleft() if early else self.replicas[index].get("waiting for rollouts"))
            self.served[index] += 1
        self._route.popleft()
        self.outstanding -= 1
        out = _join(parts)
        out.meta_info["partial_rollout_interruptions"] = sum(
            int(part.meta_info.get("partial_rollout_interruptions", 0)) for part in parts
        )
        return out

    def generate(self, gen_batch: DataProto) -> DataProto:
        """One generation call of the trainer's (validation's, evaluators'): ``gen_batch`` (prompts already
        repeated, ``meta_info`` the call's sampling) split over the replicas (:meth:`_put_parts`), each part
        answered after the batches already in flight on its replica (whose results are kept for
        :meth:`next_result`), joined in order. Every replica answers with the weights it holds: the last push
        (``meta_info["rollout_weight_version"]``, the oldest of the parts')."""

        def call(part: DataProto, seed: int | None) -> tuple:
            part.meta_info["seed"] = seed
            return (GENERATE, part)

        route = self._put_parts(gen_batch, call, gen_batch.meta_info.get("seed"), "submitting a generation call")
        parts = []
        for index in route:
            replica, early = self.replicas[index], self._early[index]
            while len(early) < sum(index in batch for batch in self._route):  # the batches in flight on it first
                early.append(replica.get("waiting for rollouts ahead of a generation call"))
            parts.append(replica.get("waiting for a generation call"))
        out = _join(parts)
        out.meta_info["rollout_weight_version"] = min(
            int(part.meta_info.get("rollout_weight_version", self.version)) for part in parts
        )
        return out

    def _put_parts(
        self, data: DataProto, request: Callable[..., tuple], seed: int | None, doing: str
    ) -> tuple[int, ...]:
        """Split ``data`` into contiguous parts of near-equal rows, one per replica (fewer when it has fewer rows),
        and queue ``request(part, seed)`` on each; returns the replicas used, in the parts' order. Every replica
        works on every batch, so none idles while one batch is in flight (``staleness_threshold=0``), and the parts
        are read back in order, so the data order does not depend on which replica finishes first.

        Part ``i`` samples with the call's ``seed`` (None: unseeded) offset by ``i``, as
        data-parallel rank ``i`` of a synchronous call does (:func:`~verl.utils.seeding.replica_seed`): copies of
        one prompt in two parts would otherwise draw the same responses."""
        rows = len(data)
        count = min(len(self.replicas), max(rows, 1))
        for replica in self.replicas[:count]:
            if not replica.alive():
                raise replica.dead_error(doing)
        bounds = [rows * i // count for i in range(count + 1)]
        for index in range(count):
            # a copy of the rows (a view would pickle the whole batch); plain pickles both ways: torch's queue
            # pickler would share tensor storage through file descriptors of the producing process, which a killed
            # replica takes with it mid-read
            part = data.select_idxs(np.arange(bounds[index], bounds[index + 1]))
            part_seed = None if seed is None else replica_seed(int(seed), index)
            self.replicas[index].put_request(pickle.dumps(request(part, part_seed)))
        return tuple(range(count))

    def push_weights(self, version: int) -> int:
        """Send the trainer's weights as ``version`` to every replica; returns the bytes sent. Blocks until each
        replica has taken them (between two batches, or at once with partial rollouts)."""
        for replica in self.replicas:
            if not replica.alive():
                raise replica.dead_error("pushing weights")
        for replica in self.replicas:
            replica.put_sync(int(version))
        try:
            sent = int(sum(self._actor_group.send_rollout_weights(int(version))))
        except Exception as err:
            # a broadcast fails as soon as a peer's socket closes, which can be before the killed replica is
            # reaped: wait for it briefly, so a dead rollout worker is named as such (not as a transfer failure)
            for replica in self.replicas:
                replica.wait_exit(5.0 / len(self.replicas))
                if not replica.alive():
                    raise replica.dead_error("pushing weights") from err
            raise
        self.version = int(version)
        if self.check_weight_sync:
            self._check_sync(int(version))
        return sent

    def _check_sync(self, version: int) -> None:
        """Compare the digests of what each replica's engine holds after push ``version`` (reported by the process)
        with those of what the actor sent; raises ``WeightSyncMismatchError`` naming the tensors that differ."""
        from verl.workers.rollout.weight_digest import check_push_report

        sent = {}
        for part in self._actor_group.last_sent_digest():
            sent.update(part)
        for replica in self.replicas:
            ack = replica.get(f"waiting for it to report the weights of push {version}", acks=True)
            where = f"weight push {version} to the {replica.describe()}, {ack['engine']} engine"
            check_push_report(sent, ack, where)

    def close(self) -> None:
        """Stop the replicas (politely, then by force) and give the rollout pool back to Ray."""
        for replica in self.replicas:
            replica.close()
        self.placement.release()


def _join(parts: list[DataProto]) -> DataProto:
    """The parts of one batch, in order, as one batch (the first part's meta where they differ)."""
    return parts[0] if len(parts) == 1 else DataProto.concat(parts, meta_info_conflicts="first")
