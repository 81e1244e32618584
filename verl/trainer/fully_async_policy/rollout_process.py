"""Inside one rollout replica: its own copy of the policy and engine, the weight receiver and the request loop.

:func:`rollouter_main` runs in a process the driver spawned (:class:`~verl.trainer.fully_async_policy.replicas.
ProcessReplica`) or in a thread of a Ray actor (:class:`~verl.trainer.fully_async_policy.replicas.RayReplica`); the
two hand it the same five channels (requests, results, syncs, the sync-pending flag, acks), as multiprocessing or
thread queues. It builds a rollout-only :class:`~verl.workers.fsdp_workers.ActorRolloutRefWorker` (loaded from
``actor_rollout_ref.model.path``) and loops: take pending weights, take the next request, answer it, queue the
result. A request is one of two kinds:

* :data:`ROLLOUTS` ``(prompts, meta)``: a training prompt batch; ``rollout.n`` responses per prompt
  (:func:`verl.trainer.ppo.batch_rollout.generate_groups`, so multi-turn agent loops and tools run here too), every
  row stamped with the weight version it was generated with;
* :data:`GENERATE` ``(gen_batch,)``: one generation call as the trainer would make it on an engine of its own
  (prompts already repeated, ``meta_info`` the call's sampling: validation's greedy decoding), the result's
  ``meta_info["rollout_weight_version"]`` the version that generated it.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import traceback
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from verl.models.lora import lora_enabled
from verl.protocol import DataProto

__all__ = ["GENERATE", "POLL_S", "ROLLOUTS", "STOP", "rollouter_main"]

logger = logging.getLogger(__name__)

POLL_S = 0.05  # how often a waiting side checks that the other one is still alive
STOP = "stop"  # the request that ends the loop
ROLLOUTS = "rollouts"  # a training prompt batch (module docstring)
GENERATE = "generate"  # one generation call of the trainer's (module docstring)


class RolloutReplicaBody:
    """What runs inside a rollout replica: its engine, the weight receiver, the request loop.

    The engine is one rollout-only :class:`~verl.workers.fsdp_workers.ActorRolloutRefWorker` in this process, or,
    for a tensor-parallel replica (``pool``: a slice of the rollout pool of ``tensor_model_parallel_size``
    bundles), a Ray worker group of that many rollout workers forming one vLLM engine over its ranks. Either way
    the replica speaks to it through the worker's methods (``receive_rollout_weights``, ``generate_sequences``, the
    agent loops' calls), so there is one receive path and one generation path.
    """

    def __init__(
        self,
        config: DictConfig,
        wire: tuple[str, int, str, int, int],
        syncs: Any,
        sync_pending: Any,
        partial_rollout: bool,
        acks: Any = None,
        pool: Any = None,
    ) -> None:
        from verl.trainer.ppo.batch_rollout import make_agent_loop_manager

        self.config = config
        self.worker: Any = None  # the engine's worker when it runs in this process
        if pool is None:
            from verl.workers.fsdp_workers import ActorRolloutRefWorker

            self.worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="rollout")
            self.worker.init_model()
            self.engine: Any = self.worker
            tokenizer = self.worker.tokenizer
        else:
            self.engine = _rollout_group(config, pool)
            tokenizer = _tokenizer(config)
        info = self._each("rollout_info")
        self.rollout_name = str(info[0]["name"])
        logger.info(
            "rollout replica ready: %s engine over %d rank(s)%s",
            self.rollout_name,
            len(info),
            f" (tensor-parallel size {info[0]['tp_size']})" if "tp_size" in info[0] else "",
        )
        # rollout.multi_turn.enable: the agent loops run here, over this replica's engine (with the judge of
        # reward_model.judge.overlap_rollout scoring each trajectory as it ends)
        self.agent_loops = make_agent_loop_manager(config, tokenizer, self.engine)
        if lora_enabled(config.actor_rollout_ref.model) and self.rollout_name == "hf":
            self._each("add_rollout_lora")
        # the weight-transfer group: (rank 0's host, port, backend, this replica's first rank, how many receive)
        self.wire = wire
        self.syncs = syncs
        self.sync_pending = sync_pending
        self.partial_rollout = partial_rollout
        self.version = 0
        self.acks = acks  # rollout.check_weight_sync: where each push's held-weight digests go

    def close(self) -> None:
        """Stop the engine of a tensor-parallel replica's group, whose ranks are killed when this process ends: a
        stopped vLLM engine releases its shared memory in /dev/shm, a killed one would leave it there."""
        if self.worker is not None:
            return  # an engine in this process ends with it
        try:
            self.engine.shutdown_rollout()
        except Exception:  # noqa: BLE001 - the replica is ending anyway; a start on this host removes what is left
            logger.warning("stopping the rollout engine of a tensor-parallel replica failed", exc_info=True)

    def _each(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` on every rank of the engine: the one worker here, or each actor of the group."""
        result = getattr(self.engine, method)(*args)
        return [result] if self.worker is not None else list(result)

    def connect(self) -> None:
        """Join the trainer's weight-transfer group (its store exists once the trainer saw "ready"): every rank of
        the engine is a receiver."""
        host, port, backend, first_rank, receivers = self.wire
        self._each("join_weight_receivers", host, port, backend, first_rank, receivers)

    def take_sync(self) -> None:
        """Receive one push on every rank (blocking on the trainer's broadcast) and load it into the engine."""
        self.syncs.get()
        reports = self._each("receive_rollout_weights", self.acks is not None)
        if self.acks is not None:
            self.acks.put({k: v for k, v in reports[0].items() if k != "version"})
        self.version = int(reports[0]["version"])
        if self.syncs.empty():
            self.sync_pending.clear()

    def generate(self, prompts: DataProto, meta: dict[str, Any]) -> DataProto:
        from verl.trainer.ppo.batch_rollout import generate_groups, generate_rollouts

        start_version = self.version
        interruptions = 0
        n = int(self.config.actor_rollout_ref.rollout.n)
        # partial rollouts stop and continue the hf engine's own decode loop (in this process)
        use_partial = self.partial_rollout and self.rollout_name == "hf" and self.agent_loops is None

        def generate_fn(gen_batch: DataProto) -> DataProto:
            nonlocal interruptions
            if not use_partial:
                return generate_rollouts(self.engine, self.agent_loops, gen_batch)
            from verl.trainer.fully_async_policy.partial_rollout import generate_resumable

            rollout = self.worker.rollout
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

    def generate_call(self, gen_batch: DataProto) -> DataProto:
        """One generation call of the trainer's (validation's): ``gen_batch`` (repeated prompts, the call's
        sampling in ``meta_info``) -> its rollouts on this replica's engine or agent loops, with the weight version
        that generated them in ``meta_info["rollout_weight_version"]``."""
        from verl.trainer.ppo.batch_rollout import generate_rollouts

        out = generate_rollouts(self.engine, self.agent_loops, gen_batch)
        out.meta_info["rollout_weight_version"] = self.version
        return out

    def answer(self, kind: str, payload: tuple) -> DataProto:
        """The result of one request of ``kind`` (module docstring)."""
        if kind == ROLLOUTS:
            return self.generate(*payload)
        if kind == GENERATE:
            return self.generate_call(*payload)
        raise ValueError(f"unknown rollout request {kind!r}; expected {ROLLOUTS!r} or {GENERATE!r}")


def _rollout_group(config: DictConfig, pool: Any) -> Any:
    """A Ray worker group of rollout-only workers on ``pool`` (``tensor_model_parallel_size`` bundles of one node),
    its engine started: vLLM over the group's ranks (its ``external_launcher``, as in synchronous training)."""
    from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    cia = RayClassWithInitArgs(ActorRolloutRefWorker, config.actor_rollout_ref, role="rollout")
    group = RayWorkerGroup(pool, cia)
    group.init_model()
    return group


def _tokenizer(config: DictConfig) -> Any:
    """The policy's tokenizer, loaded here (the agent loops' renderer of a replica whose engine runs elsewhere)."""
    from verl.models.loader import load_tokenizer
    from verl.utils.tokenizer import use_chat_template

    model = config.actor_rollout_ref.model
    tokenizer = load_tokenizer(model.tokenizer_path or model.path, trust_remote_code=bool(model.trust_remote_code))
    use_chat_template(tokenizer, model.custom_chat_template)
    return tokenizer


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
    pool: Any = None,
) -> None:
    """Entry point of a rollout replica (see the module docstring). Reports ``"ready"`` once the model is loaded,
    then one result per request; an exception is reported as ``("error", traceback)`` before exiting.

    ``parent_pid``: the driver's pid, for a spawned process to exit when the driver is gone (None in a Ray actor,
    which Ray stops with its owner). ``pool``: a tensor-parallel replica's slice of the rollout pool, where its
    engine's ranks run (None: the engine runs in this process)."""
    from verl.utils.logging_utils import configure_logging

    configure_logging(False, None)
    cfg = OmegaConf.create(config)
    proc = None
    try:
        proc = RolloutReplicaBody(cfg, wire, syncs, sync_pending, partial_rollout, acks, pool)
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
            kind, *payload = pickle.loads(item)  # noqa: S301 - written by the driver
            results.put(pickle.dumps(proc.answer(kind, tuple(payload))))
    except Exception:  # noqa: BLE001 - the driver reports it, naming this process
        results.put(("error", traceback.format_exc()))
        raise
    finally:
        if proc is not None:
            proc.close()
