"""The rollout engine of the actor worker: which engine generates (``hf`` on the actor's own module, vLLM), the
tensor-parallel groups of a vLLM engine, and the weights that follow the actor (synced after each update, or pushed
to the separate rollout process of the asynchronous trainers).

A part of :class:`~verl.workers.fsdp_workers.ActorRolloutRefWorker`: it reads the worker's config, actor module,
rank and offload state.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.distributed as dist

from verl.models.log_z_head import without_training_only
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils import fsdp_utils
from verl.workers.fsdp_setup import loaded
from verl.workers.roles import ACTOR_ROLES, ROLLOUT_ROLES

logger = logging.getLogger(__name__)


class RolloutEngineMixin:
    """Building the rollout engine of an actor worker and keeping its weights in step with the actor."""

    def _resolve_rollout_name(self) -> str:
        """``rollout.name``, with ``auto`` resolved: vLLM where it is usable for this model and rank count, else
        ``hf`` (see :func:`verl.workers.rollout.base.vllm_usable_for`)."""
        from verl.workers.rollout.base import vllm_usable_for

        name = str(self.config.rollout.name)
        if name != "auto":
            return name
        # a user's module object (verl.ActorModel) trains in place: generation must run on it, not on a copy
        usable, why_not = vllm_usable_for(
            None if self._given_actor_module is not None else self.model_path,
            self.world_size,
            int(self.config.rollout.tensor_model_parallel_size),
        )
        if not usable:
            logger.info("rollout.name=auto: using hf because %s", why_not)
        hf = self.config.rollout.engine_kwargs.hf
        if usable and (hf.decode_mode is not None or hf.decode_weights is not None):
            logger.warning("rollout.name=auto picked vllm: rollout.engine_kwargs.hf (the hf decode loop) is not used")
        return "vllm" if usable else "hf"

    def _build_rollout(self) -> None:
        from verl.workers.rollout.base import get_rollout_class

        if self._given_rollout is not None:
            self.rollout_name = "given"
            self.rollout = self._given_rollout
            self._sync_rollout_weights()
            return
        self.rollout_name = self._resolve_rollout_name()
        failure: Exception | None = None
        if self.rollout_name != "hf":
            try:
                rollout_cls = get_rollout_class(self.rollout_name)
                self.rollout = rollout_cls(self.model_path, self.config.rollout, tokenizer=self.tokenizer)
            except Exception as err:  # noqa: BLE001 - decided below, together with the other ranks
                failure = err
        # Every rank must run the same engine kind: the weight sync after each update is a collective of the ranks
        # with an engine, so a rank on hf (its engine failed, or auto decided otherwise there) would leave the
        # others waiting in it. Asked on every rank, whatever it chose, so that all take part in the all-reduce.
        started_everywhere = self._all_ranks_agree(self.rollout_name != "hf" and failure is None)
        if started_everywhere:
            self._rollout_tp_group = self._build_rollout_tp_group()
            self._sync_rollout_weights()
            return
        if self.rollout_name != "hf":
            stop = getattr(self.rollout, "shutdown", None)
            if callable(stop):
                stop()  # vLLM: its groups on this rank; the actor's world stays
            self.rollout = None
            if self.config.rollout.name != "auto":
                if failure is not None:
                    raise failure
                raise RuntimeError(
                    f"rollout.name={self.rollout_name}: the engine failed to start on another rank (see its log)"
                )
            logger.warning(
                "rollout.name=auto: vLLM failed to start (%s); using the hf engine",
                failure if failure is not None else "on another rank",
            )
            self.rollout_name = "hf"
        # hybrid engine: generation runs on the very module the actor trains
        self.rollout = get_rollout_class("hf")(self.actor_module, self.config.rollout, tokenizer=self.tokenizer)

    def _all_ranks_agree(self, ok: bool) -> bool:
        """Whether ``ok`` holds on every rank (a MIN all-reduce; just ``ok`` without a process group)."""
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            return ok
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=self.compute_device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def _build_rollout_tp_group(self) -> Any:
        """The gloo group of this rank's tensor-parallel rollout engine (None for tp = 1): the
        ``rollout.tensor_model_parallel_size`` consecutive ranks vLLM made one engine of. They pool their prompt
        chunks before each generation (a tensor-parallel engine runs one batch across its ranks). Every rank
        creates every group, in the same order (``new_group`` is collective)."""
        tp = int(getattr(self.rollout, "tp_size", 1))
        if tp <= 1:
            return None
        world, mine = dist.get_world_size(), None
        for start in range(0, world, tp):
            # gloo: the group carries pickled DataProto chunks, which need no device copies
            group = dist.new_group(list(range(start, start + tp)), backend="gloo")
            if start <= self.rank < start + tp:
                mine = group
        return mine

    def _rollout_weights(self):
        """``(name, full tensor)`` of the actor under the plain transformers names (LoRA adapters merged in).

        A lazy iterator that gathers one tensor at a time, whose every step is a collective on a sharded model
        (every rank must drain it; all ranks receive each tensor), when ``rollout.layered_summon`` is set or the
        actor has more than one rank: each rank then feeds its own engine, and gathering the whole model up front
        on every rank would hold a second full copy of it beside the engine's. One rank without
        ``layered_summon``: the whole state dict up front.
        """
        module = self.actor_module
        layered = bool(self.config.rollout.layered_summon) or self.world_size > 1
        if self._is_lora:
            items = self._merged_lora_weights(module)
            return items if layered else iter(list(items))
        if layered:
            items = fsdp_utils.iter_full_params_layered(module)
        else:
            items = iter(fsdp_utils.get_full_model_state_dict(module).items())
        # a head the loss trains beside the policy (FlowRL's log Z) is no weight of the model the engine serves
        items = without_training_only(items)
        # a wrapper (e.g. verl.ActorModel) names its inner transformers model's weights "<prefix><name>"
        prefix = getattr(module, "weights_prefix", "")
        if prefix:
            items = ((k[len(prefix) :] if k.startswith(prefix) else k, v) for k, v in items)
        return items

    @staticmethod
    def _merged_lora_weights(module):
        module.merge_adapter()
        try:
            for name, tensor in module.get_base_model().state_dict(keep_vars=True).items():
                if "lora_" not in name:
                    yield name.replace(".base_layer.", "."), fsdp_utils.full_tensor_cpu(tensor).clone()
        finally:
            module.unmerge_adapter()

    def _sync_rollout_weights(self) -> None:
        """Push the actor's current weights into this rank's engine (every rank has one; a collective on >1 rank).

        Each rank hands its engine the same lazy sequence of full tensors (:meth:`_rollout_weights`), which the
        engine consumes one at a time: the peak extra memory is one full tensor plus the engine's own copy of the
        weights. Whatever the engine leaves unread is drained, also when it raises, so every rank takes part in
        the same gathers and none waits forever for a rank whose engine failed.
        """
        if self.rollout is None or getattr(self, "rollout_name", "hf") == "hf":
            return  # hf generates with the actor's own module: nothing is copied, so nothing can differ
        items = self._rollout_weights()
        check = self._weight_sync_checkable()
        if check:
            from verl.workers.rollout.weight_digest import DigestingStream

            items = DigestingStream(items, cast=self.rollout.llm.llm_engine.model_config.dtype)
        try:
            self.rollout.update_weights(items)
            pulled = items.pulled if check else set()
        finally:
            for _ in items:
                pass
        if check:
            self._check_engine_weights(items, pulled)

    def _weight_sync_checkable(self) -> bool:
        """``rollout.check_weight_sync`` on a vLLM engine of one rank per engine (a tensor-parallel engine holds
        shards, whose digests are not the full tensors')."""
        if not bool(self.config.rollout.check_weight_sync):
            return False
        llm = getattr(self.rollout, "llm", None)
        return (
            callable(getattr(llm, "collective_rpc", None)) and int(self.config.rollout.tensor_model_parallel_size) == 1
        )

    def _check_engine_weights(self, stream: Any, pulled: set[str]) -> None:
        """Read back what the vLLM engine holds after a sync and compare it with what the actor sent
        (:func:`verl.workers.rollout.weight_digest.check_vllm_sync`); raises ``WeightSyncMismatchError``."""
        from verl.workers.rollout.weight_digest import check_vllm_sync, vllm_held_digest

        report = self.rollout.llm.collective_rpc(vllm_held_digest)[0]
        check_vllm_sync(stream.digests, pulled, report, f"rank {self.rank}, vLLM engine")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_weight_sender(self, host: str, port: int, backend: str, receivers: int = 1) -> None:
        """Rank 0 opens the weight-transfer group to ``receivers`` rollout processes of its own (the asynchronous
        trainers, :mod:`verl.workers.rollout.weight_transfer`); waits until they all join."""
        from verl.workers.rollout.weight_transfer import WeightTransferGroup

        if self.rank == 0:
            self._weight_sender = WeightTransferGroup(host, port, rank=0, backend=backend, receivers=receivers)
            self._weight_sender.connect()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def send_rollout_weights(self, version: int) -> int:
        """Push the actor's weights to the rollout process as ``version`` (rank 0 sends; every rank takes part in
        the gathers of a sharded actor). With LoRA only the adapter tensors travel (``lora_A``/``lora_B`` under
        the PEFT names; the rollout model carries the same adapters), else the full weights under transformers
        names. Returns the bytes sent (0 on the other ranks)."""
        actor = self._require(self.actor, "send_rollout_weights", ACTOR_ROLES)
        if self._is_lora:
            items = (
                (name, fsdp_utils.full_tensor_cpu(p.detach()))
                for name, p in actor.actor_module.named_parameters()
                if "lora_" in name
            )
        else:
            items = self._rollout_weights()
        with loaded(self.actor_offload):
            if self.rank == 0:
                from verl.workers.rollout.weight_digest import DigestingStream

                stream = DigestingStream(items)
                sent = self._weight_sender.send(stream, {"version": int(version)})
                self._last_sent_digest = stream.digests
                return sent
            for _ in items:
                pass
        return 0

    # ------------------------------------------------------------------ the receiving side (a rollout replica)
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add_rollout_lora(self) -> None:
        """A rollout-only hf worker's model gets the actor's LoRA adapters (same rank, alpha, targets), so a push
        of only the adapter tensors lands in parameters of the same names (the engine generates with the module
        in place)."""
        from verl.models.lora import build_lora

        module = build_lora(self.actor_module, self.config.model)
        module.requires_grad_(False)
        module.eval()
        self.actor_module = module
        self.rollout.module = module

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def join_weight_receivers(self, host: str, port: int, backend: str, first_rank: int, receivers: int) -> None:
        """Join the trainer's weight-transfer group (:meth:`init_weight_sender`) as receiver ``first_rank +
        rank``: every rank of a rollout replica receives each push (a tensor-parallel engine loads its shard of
        each tensor on every rank). Blocks until the whole group has joined."""
        from verl.workers.rollout.weight_transfer import WeightTransferGroup

        self._weight_receiver = WeightTransferGroup(
            host, port, rank=int(first_rank) + self.rank, backend=backend, receivers=int(receivers)
        )
        self._weight_receiver.connect()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def receive_rollout_weights(self, report: bool = False) -> dict[str, Any]:
        """Receive one push (blocking on the trainer's broadcast) and load it into this rank's engine: the hf
        engine generates with the worker's module, so copying into it is the update; vLLM loads the stream.

        Returns ``{"version": v}``, with ``report``: ``"engine"`` and what the engine holds afterwards, for
        :func:`verl.workers.rollout.weight_digest.check_push_report` (``rollout.check_weight_sync``)."""
        from verl.models.lora import lora_enabled
        from verl.workers.rollout.weight_digest import DigestingStream, module_digest, vllm_held_digest
        from verl.workers.rollout.weight_transfer import load_named_tensors

        meta, tensors = self._weight_receiver.receive()
        out: dict[str, Any] = {"version": int(meta["version"])}
        if self.rollout_name == "hf":
            load_named_tensors(self.actor_module, tensors)
            if report:
                out.update(
                    engine="hf", held=module_digest(self.actor_module, lora_only=lora_enabled(self.config.model))
                )
            return out
        stream = DigestingStream(tensors)
        self.rollout.update_weights(stream)
        pulled = stream.pulled
        for _ in stream:  # whatever the engine left unread, so the stream stays aligned
            pass
        if report:
            out.update(
                engine="vllm", report=self.rollout.llm.collective_rpc(vllm_held_digest)[0], pulled=sorted(pulled)
            )
        return out

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def last_sent_digest(self) -> dict[str, Any]:
        """Rank 0: name -> :class:`~verl.workers.rollout.weight_digest.TensorDigest` of each tensor the last
        :meth:`send_rollout_weights` pushed, as they left the actor; the other ranks: empty."""
        return dict(getattr(self, "_last_sent_digest", {}) or {})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rollout_info(self) -> dict[str, Any]:
        """Which engine generates on this rank: ``name`` (``hf``, ``vllm``, ``given``), the ``pid`` of the process
        it runs in and, for vLLM, ``tp_size`` / ``dp_rank`` / ``dp_size`` (tensor-parallel size, index of this
        rank's replica, number of replicas), ``weight_syncs`` (weight updates received) and ``last_weight_sync_s``.
        The group returns one dict per rank."""
        rollout = self._require(self.rollout, "rollout_info", ROLLOUT_ROLES)
        info: dict[str, Any] = {"name": self.rollout_name, "rank": self.rank, "pid": os.getpid()}
        for key in ("tp_size", "dp_rank", "dp_size", "weight_syncs", "last_weight_sync_s"):
            if hasattr(rollout, key):
                info[key] = getattr(rollout, key)
        return info

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def shutdown_rollout(self) -> None:
        """Stop this rank's rollout engine and release what it holds outside the process (vLLM: its process groups
        and the shared-memory queue of a tensor-parallel engine, which a killed process would leave in /dev/shm),
        e.g. before the group's processes are killed. The actor keeps working; generation needs init_model again."""
        stop = getattr(self.rollout, "shutdown", None)
        if callable(stop) and self.rollout_name != "hf":
            stop()
        self.rollout = None
