"""The engines behind the service: the project's own (``hf``) rollout engine, or vLLM's, each with the engine
floor's request server in front (:mod:`verl.workers.rollout.request_server`), the one request-serving core that
the agent loop uses too. Neither has a decode or step loop of its own here:

- ``hf``: :class:`verl.workers.rollout.hf_rollout.HFRollout` (the static-cache fast decode loop for
  Llama/Qwen2/Qwen3/Mistral, transformers' forward otherwise) behind a
  :class:`~verl.workers.rollout.request_server.BatchingRequestServer` with its per-step hook: tokens stream, rows
  that end stop being decoded; one temperature/top-p per engine call.
- ``vllm``: the ``vllm.LLM`` engine that :class:`verl.workers.rollout.vllm_rollout.vLLMRollout` starts, behind its
  :class:`~verl.workers.rollout.vllm_request_server.VLLMRequestServer` (continuous batching, request by request:
  tokens stream, cancelled requests are aborted); per-request sampling parameters.

``engine="auto"`` takes vLLM where the training rollout's ``name=auto`` would (installed, model from a directory,
head dim vLLM's CPU kernels support; :func:`verl.workers.rollout.base.vllm_usable_for`), else ``hf``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.export_info import export_name
from verl.workers.rollout.request_server import BatchingRequestServer, RequestServer, TokenRequest

logger = logging.getLogger(__name__)

ENGINES = ("auto", "hf", "vllm")


@dataclass
class ModelSource:
    """A servable model directory: ``path`` (a Hugging Face dir, LoRA merged in if there was one) and ``name``.

    ``cleanup`` lists temporary directories (a merged LoRA model) removed by :meth:`close`.
    """

    path: str
    name: str
    lora: str | None = None
    cleanup: list[str] = field(default_factory=list)

    def close(self) -> None:
        """Remove the temporary directories."""
        for path in self.cleanup:
            shutil.rmtree(path, ignore_errors=True)
        self.cleanup.clear()


def _adapter_dir(path: str) -> str | None:
    for candidate in (path, os.path.join(path, "lora_adapter")):
        if os.path.isfile(os.path.join(candidate, "adapter_config.json")):
            return candidate
    return None


def _checkpoint_role_dir(path: str) -> str | None:
    """The role dir of a training checkpoint (``global_step_N`` or ``global_step_N/actor``), or None."""
    from verl.checkpoint.sharded_state import has_shards

    for candidate in (path, os.path.join(path, "actor")):
        if os.path.isdir(candidate) and has_shards(candidate, "model"):
            return candidate
    return None


def _checkpoint_name(model: str) -> str:
    """``outputs/verl/demo/global_step_12[/actor]`` -> ``demo-step12``: a checkpoint named after its run."""
    path = os.path.normpath(model)
    if os.path.basename(path) in ("actor", "critic"):
        path = os.path.dirname(path)
    step = os.path.basename(path)
    run = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if step.startswith("global_step_") and run:
        return f"{run}-step{step[len('global_step_') :]}"
    return step


def resolve_model_source(model: str, lora: str | None = None, served_name: str | None = None) -> ModelSource:
    """Turn the CLI's ``MODEL_DIR`` (and ``--lora``) into a plain Hugging Face directory to serve.

    ``model`` is a Hugging Face dir (e.g. the ``hf_model/`` a training run exports), a training checkpoint
    (``global_step_N`` or its ``actor/``: its rank shards are merged into a temporary Hugging Face dir, LoRA
    included), a bundled model name, or a PEFT LoRA adapter dir (its base is ``base_model_name_or_path`` of
    ``adapter_config.json``); ``lora`` is an adapter dir applied to ``model``. An adapter, either way or in
    ``MODEL_DIR/lora_adapter/``, is merged into the base weights once, into a temporary directory
    (:func:`verl.model_merger.base_model_merger.merge_checkpoint` does it), so both engines serve it at full speed.

    Raises:
        FileNotFoundError / ValueError: naming the path that is not a model or adapter directory.
    """
    from verl.models.loader import resolve_model_path

    adapter = None
    base: str | None = None
    role_dir = _checkpoint_role_dir(model) if lora is None else None
    if role_dir is not None:
        from verl.model_merger.base_model_merger import merge_checkpoint

        tmp = tempfile.mkdtemp(prefix="verl-serve-merged-")
        logger.info("merging checkpoint %s into a Hugging Face dir %s", role_dir, tmp)
        target = merge_checkpoint(role_dir, os.path.join(tmp, "model"))
        name = served_name or _checkpoint_name(model)
        return ModelSource(path=target, name=name, cleanup=[tmp])
    if lora is not None:
        adapter = _adapter_dir(lora)
        if adapter is None:
            raise FileNotFoundError(f"--lora {lora!r}: no adapter_config.json there (expected a PEFT adapter dir)")
        base = resolve_model_path(model)
    elif os.path.isdir(model) and _adapter_dir(model) is not None:
        adapter = _adapter_dir(model)
        has_weights = os.path.isfile(os.path.join(model, "config.json"))
        if has_weights:  # an exported dir with the adapter kept beside the base weights
            base = resolve_model_path(model)
        else:
            with open(os.path.join(adapter, "adapter_config.json"), encoding="utf-8") as fh:
                base_name = json.load(fh).get("base_model_name_or_path")
            if not base_name:
                raise ValueError(f"{adapter}/adapter_config.json has no base_model_name_or_path; use --lora")
            base = resolve_model_path(base_name)
    # an export is called after its run (verl_export.json; hf_model/ -> the run directory's name), not "hf_model"
    plain = os.path.basename(os.path.normpath(model)) or str(model)
    name = served_name or (export_name(model) if os.path.isdir(model) else plain)
    if adapter is None:
        return ModelSource(path=resolve_model_path(model), name=name)
    from verl.model_merger.base_model_merger import merge_checkpoint

    tmp = tempfile.mkdtemp(prefix="verl-serve-merged-")
    target = os.path.join(tmp, "model")
    logger.info("merging LoRA adapter %s into %s -> %s", adapter, base, target)
    merge_checkpoint(adapter, target, merge_lora=True, base_model_path=base)
    return ModelSource(path=target, name=name, lora=adapter, cleanup=[tmp])


def model_context_length(model_dir: str, tokenizer: Any) -> int:
    """Longest prompt + response the model takes: ``max_position_embeddings`` (or the tokenizer's limit)."""
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    limits = [cfg.get(k) for k in ("max_position_embeddings", "n_positions", "max_sequence_length")]
    limits.append(getattr(tokenizer, "model_max_length", None))
    usable = [int(v) for v in limits if isinstance(v, int) and 0 < v < 10**7]
    return min(usable) if usable else 2048


def eos_token_ids(model_dir: str, tokenizer: Any) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS and the model's ``generation_config`` EOS ids
    (chat models often end a turn with a token other than the tokenizer's EOS)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    path = os.path.join(model_dir, "generation_config.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            value = json.load(fh).get("eos_token_id")
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)
    if not ids:
        raise ValueError(f"{model_dir}: neither the tokenizer nor generation_config.json names an EOS token")
    return ids


def choose_engine(requested: str, model_dir: str) -> tuple[str, str]:
    """``(engine, why)``: the engine to serve with; ``auto`` decides as ``rollout.name=auto`` does."""
    if requested not in ENGINES:
        raise ValueError(f"--engine {requested!r}: expected one of {', '.join(ENGINES)}")
    if requested != "auto":
        return requested, "requested"
    from verl.workers.rollout.base import vllm_usable_for

    usable, why_not = vllm_usable_for(model_dir, world_size=1)
    return ("vllm", "vLLM is installed and usable for the model") if usable else ("hf", why_not)


@dataclass(frozen=True)
class ServerOptions:
    """How the engine's request server batches: ``max_batch_size`` requests at most, the first waiting request held
    open ``batch_wait_s`` for more (on vLLM: when the engine is idle; requests that arrive later join the running
    batch), and the metrics hooks ``on_start(request)`` / ``on_batch(size)`` (size: per ``hf`` engine call, per
    vLLM engine step)."""

    max_batch_size: int = 32
    batch_wait_s: float = 0.0
    on_start: Callable[[TokenRequest], Any] | None = None
    on_batch: Callable[[int], Any] | None = None


class HFServeEngine:
    """The project's :class:`~verl.workers.rollout.hf_rollout.HFRollout` behind a
    :class:`~verl.workers.rollout.request_server.BatchingRequestServer` with the decode loop's per-step hook.

    Args:
        model_dir: a Hugging Face directory; tokenizer: its tokenizer (left padding).
        dtype: autocast dtype name of the rollout (``float32`` turns autocast off).
        device: where the model runs (``cuda`` when available, else ``cpu``).
        options: how the request server batches.
    """

    name = "hf"

    def __init__(
        self, model_dir: str, tokenizer: Any, dtype: str, device: torch.device, options: ServerOptions
    ) -> None:
        from verl.models.loader import load_causal_lm, resolve_attn_implementation
        from verl.workers.rollout.hf_rollout import HFRollout

        self.tokenizer = tokenizer
        self.device = device
        self.max_context = model_context_length(model_dir, tokenizer)
        self.eos_ids = eos_token_ids(model_dir, tokenizer)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0])
        attn = resolve_attn_implementation("auto", device.type)
        module = load_causal_lm(model_dir, dtype=torch.float32, attn_implementation=attn).to(device).eval()
        module.requires_grad_(False)
        # one micro-batch per engine call: the request server already bounds the batch size
        config = {"dtype": dtype, "max_num_seqs": 1 << 20, "do_sample": True, "top_k": -1, "min_new_tokens": 0}
        self.rollout = HFRollout(module, config, tokenizer=tokenizer)
        meta = {"eos_token_id": self.eos_ids, "pad_token_id": self.pad_id, "do_sample": True}
        self.server: RequestServer = BatchingRequestServer(
            self.generate_batch, meta, options.batch_wait_s, step_hook=True, max_batch_size=options.max_batch_size,
            on_start=options.on_start, on_batch=options.on_batch,
        )  # fmt: skip

    def generate_batch(self, prompts: DataProto, on_step: Callable[..., Any] | None = None) -> DataProto:
        """One engine call of the request server (serving thread): the rollout's ``generate_sequences``."""
        return self.rollout.generate_sequences(prompts, on_step=on_step)

    def close(self) -> None:
        """Stop the request server (the module is freed with the engine)."""
        self.server.close()


class VLLMServeEngine:
    """vLLM's engine, started as the ``vllm`` rollout starts it, behind its
    :class:`~verl.workers.rollout.vllm_request_server.VLLMRequestServer`.

    Args:
        model_dir: a Hugging Face directory; tokenizer: its tokenizer.
        dtype: vLLM dtype; max_model_len: the engine's context length.
        options: how the request server batches (``max_batch_size`` is also vLLM's ``max_num_seqs``).
    """

    name = "vllm"

    def __init__(self, model_dir: str, tokenizer: Any, dtype: str, max_model_len: int, options: ServerOptions) -> None:
        from verl.workers.rollout.vllm_rollout import vLLMRollout

        self.tokenizer = tokenizer
        self.max_context = max_model_len
        self.eos_ids = eos_token_ids(model_dir, tokenizer)
        config = {
            "max_model_len": max_model_len,
            "prompt_length": max_model_len // 2,
            "response_length": max_model_len - max_model_len // 2,
            "max_num_seqs": options.max_batch_size,
            "dtype": dtype,
        }
        self.rollout = vLLMRollout(model_dir, config, tokenizer=tokenizer)
        self.server: RequestServer = self.rollout.request_server(
            {"eos_token_id": self.eos_ids}, batch_wait_s=options.batch_wait_s, max_batch_size=options.max_batch_size,
            on_start=options.on_start, on_batch=options.on_batch,
        )  # fmt: skip

    def close(self) -> None:
        """Stop the request server, then shut the vLLM engine down."""
        try:
            self.server.close()
        finally:
            self.rollout.shutdown()


def build_engine(
    source: ModelSource,
    tokenizer: Any,
    engine: str = "auto",
    dtype: str = "auto",
    max_model_len: int | None = None,
    options: ServerOptions | None = None,
) -> HFServeEngine | VLLMServeEngine:
    """Start the engine ``engine`` (``auto``, ``hf`` or ``vllm``) on ``source.path``, its request server with it.

    ``dtype="auto"`` is decided by :func:`verl.hardware.precision.resolve_dtype` (bf16 only where the device
    multiplies it natively), as for training.
    """
    from verl.hardware.precision import resolve_dtype_name

    options = options or ServerOptions()
    name, why = choose_engine(engine, source.path)
    logger.info("serving %s with the %s engine (%s)", source.path, name, why)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = resolve_dtype_name(dtype, device)
    if name == "vllm":
        context = max_model_len or min(model_context_length(source.path, tokenizer), 4096)
        return VLLMServeEngine(source.path, tokenizer, dtype, context, options)
    return HFServeEngine(source.path, tokenizer, dtype, device, options)
