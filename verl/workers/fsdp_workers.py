"""The workers the driver calls: actor/rollout/reference (here), critic and reward model (re-exported from
``critic_worker.py`` and ``reward_model_worker.py``), on FSDP2 (or one process).

Each public method is registered with a dispatch mode, so a WorkerGroup can split a DataProto across ranks, run
the method on every rank and merge the results. One worker class serves several roles (verl's hybrid engine):
``actor_rollout_ref`` trains the actor, generates with the same parameters and computes reference log-probs, all in
one process per rank with no second copy of the actor's weights.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import ExitStack, nullcontext
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from verl.hardware import flops_counter
from verl.hardware.precision import resolve_dtype
from verl.models.lora import lora_enabled
from verl.protocol import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils import fsdp_utils
from verl.utils.device import get_device_name, get_torch_device, init_distributed_if_needed
from verl.workers import memory_hints
from verl.workers.config import ActorRolloutRefConfig, FSDPConfig, RefConfig, RefFSDPConfig, RolloutConfig
from verl.workers.critic_worker import CriticWorker
from verl.workers.fsdp_setup import (
    ModelHolder,
    checkpoint_manager,
    enable_ulysses,
    is_already_placed,
    loaded,
    per_rank_sequences,
    private_section,
    set_torch_threads,
    shard,
)
from verl.workers.parallel_state import OffloadPolicy, gather_group_batch, own_rows
from verl.workers.reward_model_worker import RewardModelWorker
from verl.workers.roles import ACTOR_ROLES, REF_ROLES, ROLES, ROLLOUT_ROLES
from verl.workers.rollout.group_quota import generate_with_group_quota
from verl.workers.rollout.request_server import RequestServer
from verl.workers.rollout_engine import RolloutEngineMixin

# verl's module of the three workers; the critic and reward-model workers have files of their own
__all__ = ["ROLES", "ActorRolloutRefWorker", "CriticWorker", "RewardModelWorker", "worker_init_kwargs"]

logger = logging.getLogger(__name__)
# MFU peaks already logged by this process (one line per peak, not one per step)
_LOGGED_PEAKS: set[str] = set()


class ActorRolloutRefWorker(RolloutEngineMixin, Worker):
    """Actor (PPO updates), rollout (generation) and reference policy of one data-parallel rank.

    ``config`` is the ``actor_rollout_ref`` section; ``role`` one of :data:`ROLES`. With LoRA
    (``model.lora_rank > 0`` or ``model.lora_adapter_path``) the reference policy is the actor with its adapters
    disabled: no second model.

    The Python API (``verl.api``) passes the user's own objects so they are trained in place instead of being
    reloaded from ``model.path``: ``actor_module`` (any causal LM module), ``tokenizer``, ``ref_module`` (default:
    a frozen deep copy of ``actor_module`` taken before training) and ``rollout`` (a ready :class:`BaseRollout`,
    e.g. one wrapping an existing vLLM engine). Such objects only make sense on the local backend (same process).

    The worker knows nothing of agent loops: the driver's
    :class:`~verl.experimental.agent_loop.manager.AgentLoopManager` runs them (with their tools and judge) over the
    request servers of the ranks' engines (:meth:`open_request_server`).
    """

    def __init__(
        self,
        config: DictConfig | ActorRolloutRefConfig,
        role: str,
        actor_module: torch.nn.Module | None = None,
        tokenizer: Any = None,
        ref_module: torch.nn.Module | None = None,
        rollout: Any = None,
    ):
        super().__init__()
        self._given_actor_module = actor_module
        self._given_tokenizer = tokenizer
        self._given_ref_module = ref_module
        self._given_rollout = rollout
        self.rollout_name = "hf"  # resolved in init_model (rollout.name may be "auto")
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")
        set_torch_threads()
        self.config = private_section(config, ActorRolloutRefConfig)
        self.role = role
        self._is_actor = role in ACTOR_ROLES
        self._is_rollout = role in ROLLOUT_ROLES
        self._is_ref = role in REF_ROLES
        self._is_lora = lora_enabled(self.config.model)
        self.device_name = get_device_name(os.environ.get("VERL_DEVICE", "auto"))
        init_distributed_if_needed(self.device_name, timeout_s=float(self.config.nccl_timeout))
        self.compute_device = get_torch_device(self.device_name)

        n = int(self.config.rollout.n)
        # Ulysses: a group of sp ranks pools its rows, so a mini-batch splits over world / sp data-parallel groups
        self.actor_sp = int(self.config.actor.ulysses_sequence_parallel_size or 1)
        self.ref_sp = int(self.config.ref.ulysses_sequence_parallel_size or 1)
        self._sp_groups: dict[int, Any] = {}
        self.actor_offload = self.ref_offload = None
        self._reference_updated = False  # trainer.ref_update_freq gave the reference the actor's weights
        if self._is_actor:
            actor = self.config.actor
            actor.ppo_max_token_len_per_gpu = int(actor.ppo_max_token_len_per_gpu) * self.actor_sp
            actor.ppo_mini_batch_size = per_rank_sequences(
                int(actor.ppo_mini_batch_size),
                n,
                self.world_size // self.actor_sp,
                "actor_rollout_ref.actor.ppo_mini_batch_size",
            )
        self.actor_module: torch.nn.Module | None = None
        self.ref_module: torch.nn.Module | None = None
        self.actor = None
        self.ref_policy = None
        self.rollout = None
        self._rollout_tp_group = None  # a tensor-parallel vLLM engine's ranks (set by _build_rollout_tp_group)
        self._generation_held: ExitStack | None = None  # hold_generation(True) until hold_generation(False)
        self.tokenizer = None
        self.processor = None  # a vision-language model's processor (init_model)
        self.actor_optimizer = None
        self.actor_lr_scheduler = None

    def _require(self, part: Any, method: str, roles: tuple[str, ...]) -> Any:
        """``part`` (actor, rollout or reference), or a clear error when this worker's role does not build it."""
        if part is None:
            built = "" if self._role_has(roles) else f"; it needs one of the roles {roles}"
            raise RuntimeError(
                f"{method} is not available on an ActorRolloutRefWorker with role {self.role!r}{built}"
                + ("" if built else "; call init_model() first")
            )
        return part

    def _role_has(self, roles: tuple[str, ...]) -> bool:
        return self.role in roles

    # ----------------------------------------------------------------------------------------------- building
    def _load_policy(self, path: str, trainable: bool, module: torch.nn.Module | None = None) -> torch.nn.Module:
        """Load the policy from ``path`` (or take the given ``module``), move it to the device, add LoRA."""
        from verl.models.loader import load_causal_lm, resolve_attn_implementation

        model_cfg = self.config.model
        if module is None:
            module = load_causal_lm(
                path,
                dtype=torch.float32,
                trust_remote_code=bool(model_cfg.trust_remote_code),
                attn_implementation=resolve_attn_implementation(
                    model_cfg.attn_implementation, self.compute_device.type
                ),
                override_config=dict(model_cfg.override_config) or None,
            )
        if not is_already_placed(module):
            module.to(self.compute_device)
        if not trainable:
            module.requires_grad_(False)
            module.eval()
            return module
        if bool(self.config.actor.freeze_vision_tower):
            from verl.models.vlm import freeze_vision_tower

            freeze_vision_tower(module)
        if self._is_lora:
            from verl.models.lora import build_lora

            module = build_lora(module, model_cfg)
        self._attach_loss_heads(module)
        if model_cfg.enable_gradient_checkpointing:
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if hasattr(module, "enable_input_require_grads"):
                module.enable_input_require_grads()
        return module

    def _attach_loss_heads(self, module: torch.nn.Module) -> None:
        """The trainable heads the policy loss fits beside the policy (before sharding, so FSDP2 shards them with
        the root): FlowRL's log Z head (``needs_log_z``), initialised alike on every rank."""
        from verl.algorithms.core_algos import get_policy_loss_fn
        from verl.algorithms.registry import needs_log_z
        from verl.models.log_z_head import attach_log_z_head

        loss = self.config.actor.policy_loss
        if needs_log_z(get_policy_loss_fn(loss.loss_mode)):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                attach_log_z_head(module, loss.flowrl_proj_layers, loss.flowrl_proj_dropout)

    def _maybe_shard(self, module: torch.nn.Module, fsdp_config: FSDPConfig | RefFSDPConfig) -> torch.nn.Module:
        return shard(self, module, fsdp_config)

    def _sp_group(self, size: int) -> Any:
        """The sequence-parallel group of ``size`` ranks this rank belongs to (None for size 1); built once."""
        if size <= 1:
            return None
        if size not in self._sp_groups:
            from verl.utils.ulysses import sequence_parallel_group

            self._sp_groups[size] = sequence_parallel_group(self.compute_device.type, size)
        return self._sp_groups[size]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load tokenizer and models, shard them, and build the actor, the rollout engine and the reference."""
        from verl.models.loader import load_tokenizer, resolve_model_path
        from verl.utils.tokenizer import use_chat_template
        from verl.workers.actor.dp_actor import DataParallelPPOActor

        model_cfg = self.config.model
        given = self._given_actor_module
        # a given module is used in place: the path is only resolved when something is loaded from it
        self.model_path = resolve_model_path(model_cfg.path) if given is None else model_cfg.path
        if given is None and model_cfg.use_shm:
            from verl.models.shm import copy_to_shm

            self.model_path = copy_to_shm(self.model_path)
        if self._given_tokenizer is not None:
            self.tokenizer = self._given_tokenizer
        else:
            self.tokenizer = load_tokenizer(
                model_cfg.tokenizer_path or model_cfg.path,  # load_tokenizer resolves it (no weights needed)
                trust_remote_code=bool(model_cfg.trust_remote_code),
            )
            use_chat_template(self.tokenizer, model_cfg.custom_chat_template)
        from verl.models.vlm import processor_for_model

        # a vision-language model's processor, saved with the tokenizer into checkpoints' huggingface/ dir
        self.processor = processor_for_model(self.model_path, self.tokenizer) if given is None else None
        remove_padding_setting = model_cfg.use_remove_padding
        use_remove_padding = bool(remove_padding_setting)
        prefix_grouper = bool(self.config.actor.use_prefix_grouper)
        ref_source = self._given_ref_module
        if given is not None and self._is_ref and ref_source is None and not self._is_lora:
            import copy

            ref_source = copy.deepcopy(given)  # the reference is the policy as it was before any update

        if self._is_actor or self._is_rollout:
            policy = self._load_policy(self.model_path, trainable=self._is_actor, module=given)
            use_remove_padding = fsdp_utils.resolve_remove_padding(remove_padding_setting, policy, prefix_grouper)
            if self._is_actor and self.actor_sp > 1:
                enable_ulysses(policy)
            self.actor_module = self._maybe_shard(policy, self.config.actor.fsdp_config)
            setting = self.config.actor.use_torch_compile
            if self._is_actor and fsdp_utils.resolve_torch_compile(setting, self.compute_device):
                # after sharding, as the FSDP2 / torchtitan recipes do: each layer's compiled graph sits inside the
                # layer's all-gather hooks; the static-cache decode forward calls submodules directly and stays eager
                fsdp_utils.compile_decoder_layers(self.actor_module, eager_on_failure=setting is None)
        if self._is_actor:
            self.actor_optimizer, self.actor_lr_scheduler = ModelHolder.build_optimizer(
                self.actor_module, self.config.actor.optim
            )
            self.actor = DataParallelPPOActor(
                config=self.config.actor,
                actor_module=self.actor_module,
                actor_optimizer=self.actor_optimizer,
                lr_scheduler=self.actor_lr_scheduler,
                use_remove_padding=use_remove_padding,
                sp_group=self._sp_group(self.actor_sp),
                offload_activations=bool(model_cfg.enable_activation_offload),
                use_fused_kernels=bool(model_cfg.use_fused_kernels),
                log_prob_kernels=fsdp_utils.log_prob_kernels_for(setting, self.compute_device),
            )
        if self._is_rollout:
            self._build_rollout()
        if self._is_ref:
            self._build_reference(ref_source, use_remove_padding)
        if self.actor_module is not None:
            self.actor_offload = OffloadPolicy(
                self.actor_module,
                self.actor_optimizer,
                self.config.actor.fsdp_config,
                self.compute_device,
                "actor_rollout_ref.actor.fsdp_config",
            )

    def _build_reference(self, ref_source: torch.nn.Module | None, use_remove_padding: bool) -> None:
        """The reference policy: the frozen base under the LoRA adapters of the actor, else its own (sharded)
        copy of the model (``ref_source``: a given module, else loaded from the model path)."""
        from verl.workers.actor.dp_actor import DataParallelPPOActor

        ref_group = self._sp_group(self.ref_sp)
        ref_kernels = fsdp_utils.log_prob_kernels_for(self.config.ref.use_torch_compile, self.compute_device)
        if self._is_lora and self.actor_module is not None:
            if ref_group is not None:
                enable_ulysses(self.actor_module)
            self.ref_policy = DataParallelPPOActor(
                config=self.config.actor,
                actor_module=self.actor_module,
                use_remove_padding=use_remove_padding,
                sp_group=ref_group,
                use_fused_kernels=bool(self.config.model.use_fused_kernels),
                log_prob_kernels=ref_kernels,
            )
            return
        ref_model = self._load_policy(self.model_path, trainable=False, module=ref_source)
        if self.actor_module is None:  # a reference-only worker decides auto from its own model
            use_remove_padding = fsdp_utils.resolve_remove_padding(
                self.config.model.use_remove_padding, ref_model, bool(self.config.actor.use_prefix_grouper)
            )
        if ref_group is not None:
            enable_ulysses(ref_model)
        self.ref_module = self._maybe_shard(ref_model, self.config.ref.fsdp_config)
        if fsdp_utils.resolve_torch_compile(self.config.ref.use_torch_compile, self.compute_device):
            eager_on_failure = self.config.ref.use_torch_compile is None
            fsdp_utils.compile_decoder_layers(self.ref_module, eager_on_failure=eager_on_failure)
        self.ref_policy = DataParallelPPOActor(
            config=self.config.actor,
            actor_module=self.ref_module,
            use_remove_padding=use_remove_padding,
            sp_group=ref_group,
            use_fused_kernels=bool(self.config.model.use_fused_kernels),
            log_prob_kernels=ref_kernels,
        )
        self.ref_offload = OffloadPolicy(
            self.ref_module, None, self.config.ref.fsdp_config, self.compute_device, "actor_rollout_ref.ref"
        )

    # ------------------------------------------------------------------------------------------------ compute
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per prompt row (the driver repeats prompts ``rollout.n`` times beforehand)."""
        prompts = prompts.to(self.compute_device)
        prompts.meta_info.setdefault("eos_token_id", self.tokenizer.eos_token_id)
        prompts.meta_info.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        rollout = self._require(self.rollout, "generate_sequences", ROLLOUT_ROLES)
        # a tensor-parallel engine spans its group's ranks and must be given the same requests on each of them:
        # the group pools its chunks, generates them together and each rank keeps its own rows
        own = len(prompts)
        prompts, rows = gather_group_batch(prompts, self._rollout_tp_group)
        # held already (hold_generation): the parameters stay gathered and the engine awake between the calls
        hints = memory_hints.explain_out_of_memory("generation", lambda: memory_hints.generation_hints(self.config))
        with hints, nullcontext() if self._generation_held is not None else self._generation_hold(), torch.no_grad():
            # a synchronous partial rollout's call ends at its group quota (verl/workers/rollout/group_quota.py)
            output = generate_with_group_quota(rollout, prompts, pooled=len(prompts) // max(own, 1))
            output = rollout.generate_sequences(prompts) if output is None else output
        return own_rows(output, rows).to("cpu")

    def _generation_hold(self) -> ExitStack:
        """What generating needs on this rank, entered (close it to release): the hf engine's parameters gathered
        (and loaded back from an offload), the engine kept ready (:meth:`BaseRollout.stay_ready`: vLLM awake)."""
        on_actor = self.rollout_name == "hf"  # the hf engine generates with the actor's own parameters
        held = ExitStack()
        try:
            held.enter_context(loaded(self.actor_offload if on_actor else None))
            if on_actor:
                held.enter_context(fsdp_utils.full_params(self.actor_module))
            held.enter_context(self.rollout.stay_ready())
        except BaseException:
            held.close()
            raise
        return held

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hold_generation(self, hold: bool) -> None:
        """``hold=True``: keep this rank ready to generate across several :meth:`generate_sequences` calls (the hf
        engine's parameters gathered once, vLLM awake) until ``hold=False``. The driver's agent loops hold a Ray
        group for one batch of turns, whose waiting requests go out as one ``generate_sequences`` call at a time."""
        self._require(self.rollout, "hold_generation", ROLLOUT_ROLES)
        if hold and self._generation_held is None:
            self._generation_held = self._generation_hold()
        elif not hold and self._generation_held is not None:
            held, self._generation_held = self._generation_held, None
            held.close()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def open_request_server(self, meta_info: dict[str, Any]) -> RequestServer:
        """This rank's engine as a server of token requests for one batch (the agent loops' turns, sent by the
        driver's :class:`~verl.experimental.agent_loop.manager.AgentLoopManager`): the engine's
        :meth:`~verl.workers.rollout.base.BaseRollout.request_server`, with the hf engine's parameters gathered
        (and loaded back from an offload) while the server is open; closing the server releases them.

        The server is a live object of this process (threads, futures): the local backend hands it to the driver;
        a Ray group's driver batches the waiting requests into :meth:`generate_sequences` calls instead."""
        rollout = self._require(self.rollout, "open_request_server", ROLLOUT_ROLES)
        if self._rollout_tp_group is not None:
            raise ValueError(
                "open_request_server: a tensor-parallel engine spans several ranks and serves batches through "
                "generate_sequences only (rollout.tensor_model_parallel_size > 1)"
            )
        meta = dict(meta_info)
        meta.setdefault("eos_token_id", self.tokenizer.eos_token_id)
        meta.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        held = ExitStack() if self._generation_held is not None else self._generation_hold()
        try:
            server = rollout.request_server(meta)
        except BaseException:
            held.close()
            raise
        server.on_close(held.close)
        return server

    def _log_prob_meta(self, data: DataProto, section: RolloutConfig | RefConfig, sp: int = 1) -> None:
        data.meta_info["micro_batch_size"] = int(section.log_prob_micro_batch_size_per_gpu)
        # a rank holds 1 / sp of each sequence: a micro-batch of the sequence-parallel group may carry sp times the
        # per-GPU token budget (verl's rule)
        data.meta_info["max_token_len"] = int(section.log_prob_max_token_len_per_gpu) * sp
        data.meta_info["use_dynamic_bsz"] = bool(section.log_prob_use_dynamic_bsz)
        data.meta_info["temperature"] = float(self.config.rollout.temperature)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """Log-probs (``old_log_probs``) and entropies (``entropys``) of the responses under the current actor, and
        ``sum_pi_squared`` with ``actor.calculate_sum_pi_squared``."""
        actor = self._require(self.actor, "compute_log_prob", ACTOR_ROLES)
        data, rows = gather_group_batch(data.to(self.compute_device), actor.sp_group)
        self._log_prob_meta(data, self.config.rollout, self.actor_sp)
        with_sq = bool(self.config.actor.calculate_sum_pi_squared)
        hints = memory_hints.explain_out_of_memory(
            "the actor's log-prob pass", lambda: memory_hints.log_prob_hints(self.config, reference=False)
        )
        with hints, loaded(self.actor_offload):
            outputs = actor.compute_log_prob(data, calculate_entropy=True, calculate_sum_pi_squared=with_sq)
        log_probs, entropys = outputs[0], outputs[1]
        tensors = {"old_log_probs": log_probs}
        if entropys is not None:
            tensors["entropys"] = entropys
        if with_sq:  # actor.calculate_sum_pi_squared: the optimal token baselines' sum_v pi(v)^2 per token
            tensors["sum_pi_squared"] = outputs[2]
        output = DataProto.from_dict(tensors=tensors, meta_info={"temperature": data.meta_info["temperature"]})
        return own_rows(output, rows).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """Log-probs of the responses under the frozen reference policy (``ref_log_prob``)."""
        ref_policy = self._require(self.ref_policy, "compute_ref_log_prob", REF_ROLES)
        data, rows = gather_group_batch(data.to(self.compute_device), ref_policy.sp_group)
        self._log_prob_meta(data, self.config.ref, self.ref_sp)
        on_actor = self._is_lora and self.ref_module is None
        context = self.actor_module.disable_adapter() if on_actor else nullcontext()
        hints = memory_hints.explain_out_of_memory(
            "the reference's log-prob pass", lambda: memory_hints.log_prob_hints(self.config, reference=True)
        )
        with hints, loaded(self.actor_offload if on_actor else self.ref_offload), context:
            log_probs, _ = ref_policy.compute_log_prob(data, calculate_entropy=False)
        return own_rows(DataProto.from_dict(tensors={"ref_log_prob": log_probs}), rows).to("cpu")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_reference(self) -> None:
        """``trainer.ref_update_freq``: the reference policy takes the actor's current weights (the opponent of
        SPIN's next iteration; TR-DPO's hard update). Checkpoints then hold the reference too
        (:data:`REFERENCE_SUBDIR`), so a resumed run compares with the same one."""
        self._require(self.actor_module, "update_reference", ACTOR_ROLES)
        self._require(self.ref_policy, "update_reference", REF_ROLES)
        if self.ref_module is None:
            raise RuntimeError(
                "update_reference: with LoRA the reference is the base model under the actor's adapters and has no "
                "weights of its own to update"
            )
        with loaded(self.actor_offload), loaded(self.ref_offload):
            fsdp_utils.copy_module_weights(self.actor_module, self.ref_module)
        self._reference_updated = True

    def _reference_checkpoint(self) -> Any:
        from verl.checkpoint import FSDPCheckpointManager

        return FSDPCheckpointManager(self.ref_module, None, None, save_contents=["model"], load_contents=["model"])

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        """PPO update of the actor on this rank's share; then the rollout engine gets the new weights."""
        actor = self._require(self.actor, "update_actor", ACTOR_ROLES)
        data, _ = gather_group_batch(data.to(self.compute_device), actor.sp_group)
        data.meta_info["temperature"] = float(self.config.rollout.temperature)
        hints = memory_hints.explain_out_of_memory("the actor update", lambda: memory_hints.update_hints(self.config))
        with hints, loaded(self.actor_offload, with_optimizer=True):
            start = time.perf_counter()
            metrics = actor.update_policy(data)
            metrics.update(self._actor_mfu(data, time.perf_counter() - start, actor.sp_group))
            if self.actor_lr_scheduler is not None:
                metrics["actor/lr"] = self.actor_lr_scheduler.get_last_lr()[0]
                self.actor_lr_scheduler.step()
            self._sync_rollout_weights()
        metrics["training/reproducible"] = float(self._reproducible())
        return DataProto(meta_info={"metrics": metrics})

    def _reproducible(self) -> bool:
        """Whether the same command repeats this run's metrics exactly (:mod:`verl.workers.reproducibility`); said
        once on rank 0 as ``reproducibility: ...``."""
        if getattr(self, "_reproducibility", None) is None:
            from verl.workers.reproducibility import reproducibility

            engine = str(getattr(self, "rollout_name", "hf"))
            device = torch.device(self.compute_device).type
            self._reproducibility = reproducibility(engine, device, torch.are_deterministic_algorithms_enabled())
            if self.rank == 0:
                logger.info("reproducibility: %s", self._reproducibility[1])
        return self._reproducibility[0]

    def _actor_mfu(self, data: DataProto, seconds: float, sp_group: Any = None) -> dict[str, float]:
        """``perf/mfu/actor`` (verl's name): model FLOPs of the update (``ppo_epochs`` forward + backward passes
        over this rank's sequences, :mod:`verl.hardware.flops_counter`) over ``seconds`` x the peak in the actor's
        compute dtype, and ``perf/peak_flops`` (FLOP/s) with ``perf/peak_flops_measured`` (1: measured at the
        model's matmul shapes for one micro-batch, 0: the GPU's datasheet rate). Rank 0 logs the peak once."""
        config = getattr(self.actor_module, "config", None)
        mask = data.batch["attention_mask"] if "attention_mask" in data.batch.keys() else None
        if config is None or mask is None or not hasattr(config, "num_hidden_layers"):
            return {}
        if self.compute_device.type == "cuda":
            torch.cuda.synchronize(self.compute_device)
        dtype = resolve_dtype(str(self.config.actor.dtype), self.compute_device)
        shapes = flops_counter.model_matmul_shapes(config, self._micro_batch_tokens(mask))
        peak = flops_counter.peak_flops(self.compute_device, dtype, shapes)
        if peak.description not in _LOGGED_PEAKS and self.rank == 0:
            _LOGGED_PEAKS.add(peak.description)
            logger.info("MFU peak: %s", peak.description)
        epochs = int(self.config.actor.ppo_epochs)
        seqlens = mask.sum(-1).tolist()
        if bool(self.config.actor.use_prefix_grouper) and "responses" in data.batch.keys():
            from verl.workers.actor.prefix_grouping import packed_lengths

            seqlens = packed_lengths(data.batch)  # each group's prompt runs once (actor.use_prefix_grouper)
        flops = flops_counter.training_flops(config, seqlens) * epochs
        if sp_group is not None and dist.is_initialized():  # the gathered batch is shared by the group's ranks
            flops /= dist.get_world_size(sp_group)
        return {
            "perf/mfu/actor": flops_counter.mfu(flops, seconds, peak.flops),
            "perf/peak_flops": peak.flops,
            "perf/peak_flops_measured": float(peak.source == "measured"),
        }

    def _micro_batch_tokens(self, mask: torch.Tensor) -> int:
        """Tokens of one actor micro-batch on this rank (the M of its matmuls), rounded up to a power of two:
        ``ppo_max_token_len_per_gpu`` capped by the batch with ``use_dynamic_bsz``; else
        ``ppo_micro_batch_size_per_gpu`` rows of the padded length, or of the mean valid length when padding is
        removed. Rounded so that a batch a little longer or shorter than the last reuses its peak probe (a larger
        M runs no slower, so the peak errs high and the MFU low)."""
        actor_cfg = self.config.actor
        rows, width = int(mask.shape[0]), int(mask.shape[-1])
        valid = int(mask.sum().item())
        if bool(actor_cfg.use_dynamic_bsz):
            tokens = min(int(actor_cfg.ppo_max_token_len_per_gpu or valid), valid)
        else:
            micro_rows = min(int(actor_cfg.ppo_micro_batch_size_per_gpu or rows), rows)
            per_row = valid / max(rows, 1) if getattr(self.actor, "use_remove_padding", False) else width
            tokens = int(micro_rows * per_row)
        return 1 << (max(tokens, 1) - 1).bit_length()

    # -------------------------------------------------------------------------------------------- checkpoints
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int = 0, save_contents: list[str] | None = None) -> None:
        """Write this rank's model and optimizer shards, extra state and ``huggingface/`` (config + tokenizer; the
        full weights only with ``hf_model``): see :class:`~verl.checkpoint.FSDPCheckpointManager`.

        ``save_contents`` (subset of ``model``, ``optimizer``, ``extra``) overrides ``actor.checkpoint.save_contents``
        for this call (the Python API's ``save_optimizer`` / ``save_training_state`` flags).
        """
        with loaded(self.actor_offload, with_optimizer=True):
            manager = checkpoint_manager(
                self, self.actor_module, self.actor_optimizer, self.actor_lr_scheduler, self.config.actor, save_contents
            )
            manager.save_checkpoint(local_path, global_step)
        if self._reference_updated:  # no longer the initial model: resuming needs it
            with loaded(self.ref_offload):
                self._reference_checkpoint().save_checkpoint(os.path.join(local_path, REFERENCE_SUBDIR), global_step)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str) -> None:
        with loaded(self.actor_offload, with_optimizer=True):
            manager = checkpoint_manager(
                self, self.actor_module, self.actor_optimizer, self.actor_lr_scheduler, self.config.actor
            )
            manager.load_checkpoint(local_path)
            self._sync_rollout_weights()
        reference = os.path.join(local_path, REFERENCE_SUBDIR)
        if self.ref_module is not None and os.path.isdir(reference):  # updated by trainer.ref_update_freq
            with loaded(self.ref_offload):
                self._reference_checkpoint().load_checkpoint(reference, restore_rng=False)
            self._reference_updated = True


# the subdirectory of an actor checkpoint holding the reference policy's weights once trainer.ref_update_freq
# changed them
REFERENCE_SUBDIR = "reference"


def worker_init_kwargs(config: DictConfig, role: str) -> dict[str, Any]:
    """Constructor arguments of each worker role from the full PPO config (used by the driver)."""
    if role in ROLES:
        return {"config": config.actor_rollout_ref, "role": role}
    if role == "critic":
        return {"config": config.critic}
    if role == "rm":
        return {"config": config.reward_model}
    raise ValueError(f"unknown worker role {role!r}")
