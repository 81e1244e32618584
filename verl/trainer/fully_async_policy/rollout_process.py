"""Inside one rollout replica: its own copy of the policy and engine, the weight receiver and the request loop.

:func:`rollouter_main` runs in a process the driver spawned (:class:`~verl.trainer.fully_async_policy.replicas.
ProcessReplica`) or in a thread of a Ray actor (:class:`~verl.trainer.fully_async_policy.replicas.RayReplica`); the
two hand it the same five channels (requests, results, syncs, the sync-pending flag, acks), as multiprocessing or
thread queues. It builds a rollout-only :class:`~verl.workers.fsdp_workers.ActorRolloutRefWorker` (loaded from
``actor_rollout_ref.model.path``) and loops: take pending weights, take the next prompt batch, generate
``rollout.n`` responses per prompt (:func:`verl.trainer.ppo.batch_rollout.generate_groups`, so multi-turn agent
loops and tools run here too), stamp every row with the weight version it was generated with, and queue the result.
"""

from __future__ import annotations

import os
import pickle
import queue
import traceback
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from verl.models.lora import lora_enabled
from verl.protocol import DataProto

__all__ = ["POLL_S", "STOP", "rollouter_main"]

POLL_S = 0.05  # how often a waiting side checks that the other one is still alive
STOP = "stop"  # the request that ends the loop


class RolloutReplicaBody:
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
    parent_pid: int | None,
    partial_rollout: bool = False,
    acks: Any = None,
) -> None:
    """Entry point of a rollout replica (see the module docstring). Reports ``"ready"`` once the model is loaded,
    then one result per request; an exception is reported as ``("error", traceback)`` before exiting.

    ``parent_pid``: the driver's pid, for a spawned process to exit when the driver is gone (None in a Ray actor,
    which Ray stops with its owner)."""
    from verl.utils.logging_utils import configure_logging

    configure_logging(False, None)
    cfg = OmegaConf.create(config)
    try:
        proc = RolloutReplicaBody(cfg, wire, syncs, sync_pending, partial_rollout, acks)
        results.put("ready")
        proc.connect()
        while True:
            # the driver is gone: nobody will read what this process makes
            if parent_pid is not None and os.getppid() != parent_pid:
                return
            if sync_pending.is_set():
                proc.take_sync()
                continue
            try:
                item = requests.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if item == STOP:
                return
            prompts, meta = pickle.loads(item)  # noqa: S301 - written by the driver
            results.put(pickle.dumps(proc.generate(prompts, meta)))
    except Exception:  # noqa: BLE001 - the driver reports it, naming this process
        results.put(("error", traceback.format_exc()))
        raise
