"""Rollout on the actor's own module (the hybrid engine: one copy of the weights).

The actor trains ``module`` and this engine generates with the very same parameter tensors, so there is nothing
to synchronise after an update. Generation runs in eval mode under ``torch.no_grad`` with a KV cache, autocast
in ``rollout.dtype``, micro-batched by ``rollout.max_num_seqs`` rows; the module's train/eval mode and its
gradient-checkpointing state are restored afterwards.

Every module decodes through the one loop of :mod:`verl.workers.rollout.decode` (one sampler, one end-of-row and
hook logic): Llama/Qwen2/Qwen3/Mistral on a static-cache forward, other transformers models with their own forward
and KV cache, any ``forward(input_ids, attention_mask=None, position_ids=None) -> logits`` module with a full forward
per token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

from verl.base_config import omega_conf_to_dataclass
from verl.hardware.precision import resolve_dtype
from verl.models.vlm import is_vision_language_model, placeholder_token_ids, vision_forward_kwargs
from verl.protocol import DataProto
from verl.utils.device import module_compute_device
from verl.utils.seeding import generation_seed
from verl.utils.torch_functional import pad_sequence_to_length
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import (
    BaseRollout,
    SamplingSettings,
    StepHook,
    build_rollout_output,
    check_prompts,
    register_rollout,
    resolve_sampling,
    resolve_special_ids,
)
from verl.workers.rollout.decode import DecodeLoop, resolve_decode_mode
from verl.workers.rollout.request_server import BatchingRequestServer
from verl.workers.rollout.sampling import (  # noqa: F401  (filter_top_k_top_p: importable from here, as before)
    choose_tokens,
    filter_top_k_top_p,
    token_log_probs,
)


def _generation_owner(module: torch.nn.Module) -> Any:
    """The object whose ``generation_config`` ``generate`` reads (the base model under a PEFT wrapper)."""
    get_base = getattr(module, "get_base_model", None)
    return get_base() if callable(get_base) else module


def _row_hook(
    on_step: Callable[[int, slice, torch.Tensor, torch.Tensor], Any], rows: slice, stopped_at: torch.Tensor
) -> StepHook:
    """Adapt a batch-level ``on_step(step, rows, tokens, finished)`` to one micro-batch's :data:`StepHook`,
    recording in ``stopped_at[rows]`` the response length of each row it stops (first stop wins)."""

    def hook(step: int, tokens: torch.Tensor, finished: torch.Tensor) -> torch.Tensor | None:
        stop = on_step(step, rows, tokens, finished)
        if stop is None:
            return None
        stop = stop.to(torch.bool)
        newly = (stop & ~finished).cpu()
        lengths = stopped_at[rows]  # a view: writes land in stopped_at
        lengths[newly] = torch.clamp(lengths[newly], max=step + 1)
        return stop

    return hook


@register_rollout("hf")
class HFRollout(BaseRollout):
    """Generate with transformers on the actor's module.

    Args:
        module: the causal LM the actor trains (a transformers model, a PEFT/FSDP-wrapped one, or any module whose
            ``forward`` returns logits).
        config: the ``actor_rollout_ref.rollout`` section (DictConfig or dict): ``temperature``, ``top_p``,
            ``top_k``, ``do_sample``, ``response_length``, ``min_new_tokens``, ``max_num_seqs``, ``dtype``,
            ``calculate_log_probs``, ``seed``, ``val_kwargs``.
        tokenizer: used for the EOS/pad ids when ``meta_info`` does not carry them.
        gather_params: optional factory of a context manager entered around generation, see
            :meth:`gather_params`.
    """

    # Llama/Qwen2/Qwen3/Mistral modules decode on the static-cache forward (same logits, less Python per token); False
    # makes them use the model's own forward and KV cache, as every other architecture does (benchmarks compare them).
    use_static_cache: bool = True

    def __init__(
        self,
        module: torch.nn.Module,
        config: Any,
        tokenizer: Any = None,
        gather_params: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.module = module
        self.config = omega_conf_to_dataclass(config, RolloutConfig)
        self.tokenizer = tokenizer
        self._gather_params_factory = gather_params
        self._num_calls = 0
        self._decoder: DecodeLoop | None = None
        self._ready_holds = 0  # open stay_ready() blocks: the decode buffers are kept while one is open

    @contextlib.contextmanager
    def stay_ready(self) -> Iterator[None]:
        """The decode loop keeps its buffers for the block (KV caches, CUDA graphs, the weight copy). With
        ``rollout.free_cache_engine`` on a CUDA device they are freed when the outermost block ends (as vLLM sleeps),
        so the update that follows has that memory; the next rollout allocates and captures them again."""
        self._ready_holds += 1
        try:
            yield
        finally:
            self._ready_holds -= 1
            if not self._ready_holds and self.config.free_cache_engine and self._decoder is not None:
                if self._device().type == "cuda":
                    self._decoder.release()
                    torch.cuda.empty_cache()

    @contextlib.contextmanager
    def gather_params(self) -> Iterator[None]:
        """Hook around each ``generate_sequences`` call; by default it does nothing.

        A sharded actor (FSDP) holds only a slice of each parameter; the worker passes ``gather_params`` (e.g. a
        context that unshards the full parameters and reshards them on exit) so generation, which runs a
        different number of forward steps per rank, sees full weights without collectives and the memory is
        released right after. Subclasses may override this method instead.
        """
        if self._gather_params_factory is None:
            yield
            return
        with self._gather_params_factory():
            yield

    def request_server(self, meta_info: dict[str, Any]) -> BatchingRequestServer:
        """The base's batching server with this decode loop's per-step hook for batches with a streamed request:
        each token reaches its request as it is sampled (an ``on_token`` callback sees it then: the ``openai_agent``
        endpoint streams it), and a request that ends (its budget, its callback, a cancel) stops its row while the
        others go on. Batches of plain turns run without it (no host sync per decode step)."""
        return BatchingRequestServer(
            self.generate_sequences, meta_info, step_hook=True, step_hook_for_callbacks_only=True
        )

    def _device(self) -> torch.device:
        return module_compute_device(self.module)

    @contextlib.contextmanager
    def _generation_mode(self) -> Iterator[None]:
        """Eval mode for generation (no dropout, no checkpointing); restore mode and checkpointing after."""
        module = self.module
        was_training = module.training
        had_checkpointing = bool(getattr(module, "is_gradient_checkpointing", False))
        module.eval()
        try:
            yield
        finally:
            module.train(was_training)
            if had_checkpointing and not getattr(module, "is_gradient_checkpointing", False):
                module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def _seed_for_call(self, meta_info: dict[str, Any]) -> int | None:
        """``meta_info["seed"]`` as is, else :func:`~verl.utils.seeding.generation_seed` of ``rollout.seed`` and this
        engine's call index (fresh samples each step)."""
        if meta_info.get("seed") is not None:
            return int(meta_info["seed"])
        return generation_seed(self.config.seed, self._num_calls)

    def generate_sequences(
        self, prompts: DataProto, on_step: Callable[[int, slice, torch.Tensor, torch.Tensor], Any] | None = None
    ) -> DataProto:
        """Generate one response per prompt row (see :mod:`verl.workers.rollout.base` for the layout).

        ``on_step(step, rows, tokens, finished)``, when given, is called after every sampled token of each
        micro-batch (``rows``: the micro-batch's slice of the batch; ``tokens``/``finished``: ``[len(rows)]``, see
        :data:`~verl.workers.rollout.base.StepHook`); the rows whose entry of the returned mask is True stop there,
        and their ``response_mask`` ends with the token of that step. The serving engine streams and cancels
        requests through it, as does the request server of the agent loops' turns (:meth:`request_server`); plain
        generation passes none.

        Agent loops (``rollout.multi_turn.enable``) are a layer above: their turn requests arrive here batched by
        :meth:`request_server` (with this hook: each token reaches its request as it is sampled).

        Rows of a vision-language model carry their images as ``non_tensor_batch["multi_modal_inputs"]`` (see
        :class:`~verl.data.rl_dataset.RLHFDataset`): they go into the prefill forward with the model's own
        3-D positions (:meth:`_vision_prefill`); the decode steps are the usual ones.
        """
        settings = resolve_sampling(self.config, prompts.meta_info)
        input_ids, attention_mask, position_ids = check_prompts(prompts)
        owner = _generation_owner(self.module)
        model_eos = getattr(getattr(owner, "generation_config", None), "eos_token_id", None)
        eos_ids, pad_id = resolve_special_ids(prompts.meta_info, self.tokenizer, fallback_eos=model_eos)
        eos_ids = [] if settings.ignore_eos else eos_ids  # rollout.ignore_eos: nothing ends a response early
        device = self._device()
        micro = max(1, int(self.config.max_num_seqs))
        dtype = resolve_dtype(str(self.config.dtype), device)
        seed = self._seed_for_call(prompts.meta_info)
        self._num_calls += 1

        rng_devices = (
            [device.index if device.index is not None else torch.cuda.current_device()]
            if (device.type == "cuda")
            else []
        )
        responses, log_probs = [], []
        # response lengths of rows stopped by on_step (rows that end with EOS keep response_length: the EOS mask
        # already ends them)
        stopped_at = torch.full((input_ids.shape[0],), settings.response_length, dtype=torch.long)
        mm_rows = prompts.non_tensor_batch.get("multi_modal_inputs")
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._generation_mode())
            stack.enter_context(self.gather_params())
            stack.enter_context(torch.no_grad())
            stack.enter_context(torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32))
            if seed is not None:
                stack.enter_context(torch.random.fork_rng(devices=rng_devices))
                torch.manual_seed(seed)
            for start in range(0, input_ids.shape[0], micro):
                rows = slice(start, start + micro)
                resp, lp = self._generate_micro_batch(
                    input_ids[rows].to(device),
                    attention_mask[rows].to(device),
                    position_ids[rows].to(device),
                    settings,
                    eos_ids,
                    pad_id,
                    on_step=None if on_step is None else _row_hook(on_step, rows, stopped_at),
                    multi_modal_rows=None if mm_rows is None else list(mm_rows[rows]),
                )
                responses.append(pad_sequence_to_length(resp, settings.response_length, pad_id))
                if lp is not None:
                    log_probs.append(pad_sequence_to_length(lp, settings.response_length, 0.0))
        return build_rollout_output(
            prompts,
            torch.cat(responses, dim=0),
            eos_ids,
            pad_id,
            settings.response_length,
            log_probs=torch.cat(log_probs, dim=0) if log_probs else None,
            lengths=None if on_step is None else stopped_at,
        )

    def _generate_micro_batch(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        settings: SamplingSettings,
        eos_ids: Sequence[int],
        pad_id: int,
        on_step: StepHook | None = None,
        multi_modal_rows: list[Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # Columns that are padding in every row cost compute and change nothing: drop them.
        first_real = int(attention_mask.any(dim=0).long().argmax())
        input_ids, attention_mask = input_ids[:, first_real:], attention_mask[:, first_real:]
        position_ids = position_ids[:, first_real:]
        decoder = self.decode_loop(input_ids.device)
        if is_vision_language_model(self.module):
            position_ids, prefill, banned = self._vision_prefill(input_ids, attention_mask, multi_modal_rows)
            return decoder.generate(
                input_ids, attention_mask, position_ids, settings, eos_ids, pad_id, on_step,
                banned_ids=banned, **prefill,
            )  # fmt: skip
        return decoder.generate(input_ids, attention_mask, position_ids, settings, eos_ids, pad_id, on_step)

    def _vision_prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, multi_modal_rows: list[Any] | None
    ) -> tuple[torch.Tensor, dict[str, Any], list[int]]:
        """A vision-language micro-batch's ``(position_ids, prefill inputs, tokens never to sample)``.

        The prefill inputs are the rows' images and token types; the positions are the model's own 3-D ones
        ``[3, bs, L]`` (:func:`~verl.models.vlm.vision_forward_kwargs`, the ones the actor computes), from
        which the loop continues the response positions (or the text positions ``[bs, L]`` when no row of the
        micro-batch has images). Image placeholder tokens are never sampled: a placeholder inside a response would
        have no image behind it in the actor's forward (log-probs still come from the unfiltered logits).
        """
        rows = multi_modal_rows if multi_modal_rows is not None else [None] * input_ids.shape[0]
        prefill = vision_forward_kwargs(self.module, input_ids, attention_mask, rows)
        position_ids = prefill.pop("position_ids", None)
        if position_ids is None:  # no images in this micro-batch: text positions
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return position_ids, prefill, placeholder_token_ids(self.module)

    def decode_loop(self, device: torch.device) -> DecodeLoop:
        """The decode loop of this engine, kept across calls (its compiled forward or CUDA graphs and their buffers are
        reused). ``rollout.engine_kwargs.hf.decode_mode`` picks the mode, or when null ``rollout.enforce_eager``:
        true -> eager; false (default) -> CUDA graphs on CUDA, :data:`~verl.workers.rollout.decode.CPU_AUTO_MODE` on
        CPU (forwards without a static cache run eager); ``engine_kwargs.hf.decode_weights`` the weight copy."""
        hf = self.config.engine_kwargs.hf
        mode = resolve_decode_mode(bool(self.config.enforce_eager), device, hf.decode_mode)
        decoder = self._decoder
        stale = decoder is None or decoder.module is not self.module or decoder.requested_mode != mode
        if stale or decoder.static_cache != self.use_static_cache:
            decoder = self._decoder = DecodeLoop(
                self.module, mode=mode, static_cache=self.use_static_cache, decode_weights=hf.decode_weights
            )
        return decoder
