"""The rollouter: a process of its own that turns prompt batches into rollouts while the trainer trains.

Driver side, :class:`Rollouter` starts the process, hands it prompt batches (:meth:`Rollouter.submit`), reads the
finished rollouts in submission order (:meth:`Rollouter.next_result`, from a bounded queue) and pushes new weights
(:meth:`Rollouter.push_weights`) from the trainer's rank 0 over the one weight-transfer path
(:class:`~verl.workers.rollout.weight_transfer.WeightTransferGroup`: gloo on CPU, NCCL on GPU; where the process
runs and which wire it uses: :mod:`verl.trainer.fully_async_policy.placement`). Process side,
:func:`rollouter_main` builds a rollout-only :class:`~verl.workers.fsdp_workers.ActorRolloutRefWorker` (its own copy
of the policy and engine, loaded from ``actor_rollout_ref.model.path``) and loops: take pending weights, take the
next prompt batch, generate ``rollout.n`` responses per prompt (:func:`verl.trainer.ppo.batch_rollout.generate_groups`,
so multi-turn agent loops and tools run here too), stamp every row with the weight version it was generated with,
and queue the result.

Every row carries ``rollout_weight_version`` (the version of the weights its generation started with: a partial
rollout continued after a sync is as old as its oldest part) and ``rollout_weight_version_last``. Versions count
pushes: version ``v`` is the trainer's weights after its ``v``-th push (0: the initial weights).

A rollouter that dies (killed, out of memory, an exception) is found within a poll interval: the driver raises
:class:`RolloutWorkerError` naming the process and its exit code instead of waiting forever; the process itself
exits when the driver process is gone.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import queue
import traceback
from collections import deque
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from verl.models.lora import lora_enabled
from verl.protocol import DataProto
from verl.trainer.fully_async_policy.placement import ReservedGpus, place_rollouter, rollout_replicas

logger = logging.getLogger(__name__)

__all__ = ["Rollouter", "RolloutWorkerError", "rollouter_main"]

POLL_S = 0.05  # how often a waiting side checks that the other one is still alive
_STOP = "stop"


class RolloutWorkerError(RuntimeError):
    """The rollout worker process died or failed; the run stops instead of waiting for rollouts that never come."""


class _Replica:
    """Driver side of one rollout process: its queues, the process, and how it died if it did."""

    def __init__(self, ctx: Any, index: int, max_outstanding: int, check_weight_sync: bool) -> None:
        self.index = index
        self.requests: Any = ctx.Queue()
        self.results: Any = ctx.Queue(maxsize=max_outstanding)
        self.syncs: Any = ctx.Queue()
        self.sync_pending = ctx.Event()
        # rollout.check_weight_sync: after each push the process reports the digests of what its engine holds
        self.acks: Any = ctx.Queue() if check_weight_sync else None
        self.process: Any = None

    def start(self, ctx: Any, container: dict[str, Any], wire: tuple, partial_rollout: bool, gpu: str | None) -> None:
        self.process = ctx.Process(
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

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def dead_error(self, doing: str) -> RolloutWorkerError:
        code = self.process.exitcode if self.process is not None else None
        pid = self.process.pid if self.process is not None else None
        return RolloutWorkerError(
            f"the rollout worker {self.index} (pid {pid}) exited with code {code} while the trainer was {doing}; "
            "see its log above for the cause"
        )

    def get(self, doing: str, source: Any = None) -> Any:
        while True:
            try:
                item = (self.results if source is None else source).get(timeout=POLL_S)
            except queue.Empty:
                if not self.alive():
                    raise self.dead_error(doing) from None
                continue
            except (OSError, EOFError) as err:  # the queue's other end went away mid-message
                raise self.dead_error(doing) from err
            if isinstance(item, bytes):
                item = pickle.loads(item)  # noqa: S301 - written by our own rollout process
            if isinstance(item, tuple) and item and item[0] == "error":
                raise RolloutWorkerError(f"the rollout worker {self.index} (pid {self.process.pid}) failed:\n{item[1]}")
            return item

    def close(self) -> None:
        """Stop the process (politely, then by force) and close its queues."""
        if self.alive():
            self.requests.put(_STOP)
            self.process.join(timeout=10)
        if self.alive():
            self.process.kill()
            self.process.join(timeout=5)
        for q in (self.requests, self.results, self.syncs, self.acks):
            if q is None:
                continue
            q.cancel_join_thread()
            q.close()


class Rollouter:
    """The driver's handle on the rollout processes: ``rollout.nnodes * rollout.n_gpus_per_node`` replicas, one
    device each (:mod:`verl.trainer.fully_async_policy.placement`).

    Prompt batches go to the replicas in turn and their results are read back in submission order, so the data
    order (and a resumed run's) does not depend on which replica finishes first. One push reaches every replica.

    Args:
        config: the full PPO config (``actor_rollout_ref`` builds the engine; ``trainer.device`` picks the backend;
            ``rollout.nnodes * rollout.n_gpus_per_node`` is the number of replicas).
        actor_group: the trainer's actor worker group, whose rank 0 sends the weights
            (``init_weight_sender`` / ``send_rollout_weights`` of ``ActorRolloutRefWorker``).
        max_outstanding: the most prompt batches submitted and not yet read.
        partial_rollout: stop unfinished responses at a weight sync and continue them with the new weights.
        reserved: GPUs already reserved in Ray for the processes (released when the rollouter closes).
    """

    def __init__(
        self,
        config: DictConfig,
        actor_group: Any,
        max_outstanding: int,
        partial_rollout: bool = False,
        reserved: ReservedGpus | None = None,
    ) -> None:
        from verl.single_controller.base.worker import find_free_port
        from verl.utils.device import get_device_name

        self.device = get_device_name(config.trainer.device)
        ctx = mp.get_context("spawn")  # a fresh interpreter: no inherited torch threads, CUDA or locks
        self.max_outstanding = int(max_outstanding)
        self.check_weight_sync = bool(config.actor_rollout_ref.rollout.check_weight_sync)
        count = rollout_replicas(config)
        self.replicas = [_Replica(ctx, i, self.max_outstanding, self.check_weight_sync) for i in range(count)]
        self.placement = place_rollouter(self.device, actor_group, count, reserved)
        host, port, backend = self.placement.host, find_free_port(), self.placement.backend
        container = OmegaConf.to_container(config, resolve=True)
        self.outstanding = 0
        self.version = 0
        self.served = [0] * count  # batches each replica generated (read back)
        self._route: deque[int] = deque()  # the replica of each batch in flight, oldest first
        self._submitted = 0
        self._actor_group = actor_group
        try:
            for replica, gpu in zip(self.replicas, self.placement.cuda_visible_devices):
                wire = (host, port, backend, replica.index + 1, count)  # receiver ranks 1..count
                replica.start(ctx, container, wire, partial_rollout, gpu)
            for replica in self.replicas:
                item = replica.get("waiting for it to load the model")
                if item != "ready":
                    raise RolloutWorkerError(f"unexpected first message from rollout worker {replica.index}: {item!r}")
            actor_group.init_weight_sender(host, port, backend, count)
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int | None:
        """The first replica's process id."""
        return self.replicas[0].process.pid

    def submit(self, prompts: DataProto, meta: dict[str, Any]) -> None:
        """Queue a prompt batch ``[bs, prompt_len]`` for ``rollout.n`` responses each, on the next replica in turn;
        ``meta`` is the generation call's ``meta_info`` (stop/pad ids, ``seed``)."""
        if self.outstanding >= self.max_outstanding:
            raise RuntimeError(f"more than {self.max_outstanding} prompt batches in flight: read results first")
        replica = self.replicas[self._submitted % len(self.replicas)]
        if not replica.alive():
            raise replica.dead_error("submitting prompts")
        # plain pickles both ways: torch's queue pickler would share tensor storage through file descriptors of
        # the producing process, which a killed rollouter takes with it mid-read
        replica.requests.put(pickle.dumps((prompts, dict(meta))))
        self._route.append(replica.index)
        self._submitted += 1
        self.outstanding += 1

    def next_result(self) -> DataProto:
        """The rollouts of the oldest submitted batch (``bs * n`` rows), waiting for them."""
        if self.outstanding == 0:
            raise RuntimeError("no prompt batch in flight")
        index = self._route[0]
        result = self.replicas[index].get("waiting for rollouts")
        self._route.popleft()
        self.outstanding -= 1
        self.served[index] += 1
        return result

    def push_weights(self, version: int) -> int:
        """Send the trainer's weights as ``version`` to every replica; returns the bytes sent. Blocks until each
        replica has taken them (between two batches, or at once with partial rollouts)."""
        for replica in self.replicas:
            if not replica.alive():
                raise replica.dead_error("pushing weights")
        for replica in self.replicas:
            replica.syncs.put(int(version))
            replica.sync_pending.set()
        try:
            sent = int(sum(self._actor_group.send_rollout_weights(int(version))))
        except Exception as err:
            # a broadcast fails as soon as a peer's socket closes, which can be before the killed process is
            # reaped: wait for it briefly, so a dead rollout worker is named as such (not as a transfer failure)
            for replica in self.replicas:
                replica.process.join(timeout=5.0 / len(self.replicas))
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
            ack = replica.get(f"waiting for it to report the weights of push {version}", replica.acks)
            where = (
                f"weight push {version} to rollout process {replica.index} (pid {replica.process.pid}, "
                f"{ack['engine']} engine)"
            )
            check_push_report(sent, ack, where)

    def close(self) -> None:
        """Stop the processes (politely, then by force) and give their GPUs back."""
        for replica in self.replicas:
            replica.close()
        self.placement.release()


# ------------------------------------------------------------------------------------------------- process side
class _RolloutProcess:
    """What runs inside the rollout process: the worker, the weight receiver, the request loop."""

    def __init__(
        self,
        config: DictConfig,
        wire: tuple[str, int, str, int, int],
        syncs: Any,
        sync_pending: Any,
        partial_rollout: bool,
        acks: Any = None,
    ) -> None:
        from verl.trainer.ppo.batch_rollout import make_agent_loop_manager
        from verl.workers.fsdp_workers import ActorRolloutRefWorker

        self.config = config
        self.worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="rollout")
        self.worker.init_model()
        # rollout.multi_turn.enable: the agent loops run here, over this worker's engine (with the judge of
        # reward_model.judge.overlap_rollout scoring each trajectory as it ends)
        self.agent_loops = make_agent_loop_manager(config, self.worker.tokenizer, self.worker)
        self.lora = lora_enabled(config.actor_rollout_ref.model)
        if self.lora and self.worker.rollout_name == "hf":
            self._add_lora()
        # the weight-transfer group: (rank 0's host, port, backend, this process's rank, how many receive)
        self.wire = wire
        self.transfer: Any = None  # joined in connect(), after the trainer saw "ready"
        self.syncs = syncs
        self.sync_pending = sync_pending
        self.partial_rollout = partial_rollout
        self.version = 0
        self.acks = acks  # rollout.check_weight_sync: where each push's held-weight digests go

    def connect(self) -> None:
        """Join the trainer's weight-transfer group (its store exists once the trainer saw "ready")."""
        from verl.workers.rollout.weight_transfer import WeightTransferGroup

        host, port, backend, rank, receivers = self.wire
        self.transfer = WeightTransferGroup(host, port, rank=rank, backend=backend, receivers=receivers)
        self.transfer.connect()

    def _add_lora(self) -> None:
        """The rollout model gets the actor's LoRA adapters (same rank, alpha, targets), so a push of only the
        adapter tensors lands in parameters of the same names (the engine generates with the module in place)."""
        from verl.models.lora import build_lora

        module = build_lora(self.worker.actor_module, self.config.actor_rollout_ref.model)
        module.requires_grad_(False)
        module.eval()
        self.worker.actor_module = module
        self.worker.rollout.module = module

    def take_sync(self) -> None:
        """Receive one push (blocking on the trainer's broadcast) and load it into the engine."""
        from verl.workers.rollout.weight_digest import DigestingStream, module_digest, vllm_held_digest
        from verl.workers.rollout.weight_transfer import load_named_tensors

        self.syncs.get()
        meta, tensors = self.transfer.receive()
        if self.worker.rollout_name == "hf":
            # the hf engine generates with this module: copying into it is the update
            load_named_tensors(self.worker.actor_module, tensors)
            if self.acks is not None:
                held = module_digest(self.worker.actor_module, lora_only=self.lora)
                self.acks.put({"engine": "hf", "held": held})
        else:
            stream = DigestingStream(tensors)
            self.worker.rollout.update_weights(stream)
            pulled = stream.pulled
            for _ in stream:  # whatever the engine left unread, so the stream stays aligned
                pass
            if self.acks is not None:
                report = self.worker.rollout.llm.collective_rpc(vllm_held_digest)[0]
                self.acks.put({"engine": "vllm", "report": report, "pulled": sorted(pulled)})
        self.version = int(meta["version"])
        if self.syncs.empty():
            self.sync_pending.clear()

    def generate(self, prompts: DataProto, meta: dict[str, Any]) -> DataProto:
        from verl.trainer.ppo.batch_rollout import generate_groups, generate_rollouts

        start_version = self.version
        interruptions = 0
        rollout = self.worker.rollout
        n = int(self.config.actor_rollout_ref.rollout.n)

        def generate_fn(gen_batch: DataProto) -> DataProto:
            nonlocal interruptions
            use_partial = self.partial_rollout and self.worker.rollout_name == "hf" and self.agent_loops is None
            if not use_partial:
                return generate_rollouts(self.worker, self.agent_loops, gen_batch)
            from verl.trainer.fully_async_policy.partial_rollout import generate_resumable

            out, interruptions = generate_resumable(rollout, gen_batch, self.sync_pending.is_set, self.take_sync)
            return out

        # a judge scoring trajectories during the rollout reads the ground truths there
        columns = ("reward_model",) if self.agent_loops is not None and self.agent_loops.judges_rollout else ()
        rollouts = generate_groups(prompts, n, generate_fn, meta, columns)
        rows = len(rollouts)
        rollouts.non_tensor_batch["rollout_weight_version"] = np.full(rows, start_version, dtype=object)
        rollouts.non_tensor_batch["rollout_weight_version_last"] = np.full(rows, self.version, dtype=object)
        rollouts.meta_info["partial_rollout_interruptions"] = interruptions
        return rollouts


def rollouter_main(
    config: dict[str, Any],
    wire: tuple[str, int, str, int, int],
    requests: Any,
    results: Any,
    syncs: Any,
    sync_pending: Any,
    parent_pid: int,
    partial_rollout: bool = False,
    acks: Any = None,
) -> None:
    """Entry point of the rollout process (see the module docstring). Reports ``"ready"`` once the model is
    loaded, then one result per request; an exception is reported as ``("error", traceback)`` before exiting."""
    from verl.utils.logging_utils import configure_logging

    configure_logging(False, None)
    cfg = OmegaConf.create(config)
    try:
        proc = _RolloutProcess(cfg, wire, syncs, sync_pending, partial_rollout, acks)
        results.put("ready")
        proc.connect()
        while True:
            if os.getppid() != parent_pid:  # the driver is gone: nobody will read what this process makes
                return
            if sync_pending.is_set():
                proc.take_sync()
                continue
            try:
                item = requests.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if item == _STOP:
                return
            prompts, meta = pickle.loads(item)  # noqa: S301 - written by the driver
            results.put(pickle.dumps(proc.generate(prompts, meta)))
    except Exception:  # noqa: BLE001 - the driver reports it, naming this process
        results.put(("error", traceback.format_exc()))
        raise
