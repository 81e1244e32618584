"""The rollout interface, the engine registry, and what every engine shares (sampling settings, output layout).

An engine turns left-padded prompts into one response per row::

    prompts:  input_ids / attention_mask / position_ids  [bs, prompt_len]   (left-padded)
    output:   prompts [bs, prompt_len], responses [bs, response_length] (right-padded with pad id),
              input_ids / attention_mask / position_ids [bs, prompt_len + response_length],
              response_mask [bs, response_length] (1 up to and including the first EOS),
              rollout_log_probs [bs, response_length] (when rollout.calculate_log_probs)

Engines register under a name (``hf``, ``vllm``) chosen by ``actor_rollout_ref.rollout.name``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from verl.base_config import omega_conf_to_dataclass
from verl.protocol import DataProto
from verl.utils.registry import Registry, same_qualname
from verl.utils.torch_functional import compute_position_id_with_mask, get_response_mask, pad_sequence_to_length
from verl.workers.config import RolloutConfig
from verl.workers.rollout.request_server import BatchingRequestServer, RequestServer
from verl.workers.rollout.sampling import sample_from_logits  # noqa: F401  (importable from here, as before)

# Modules that register the built-in engines when imported; imported lazily so that `vllm` stays optional.
_BUILTIN_ENGINE_MODULES = {
    "hf": "verl.workers.rollout.hf_rollout",
    "vllm": "verl.workers.rollout.vllm_rollout",
}

_ROLLOUT_REGISTRY: dict[str, type[BaseRollout]] = {}


def _check_rollout_class(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, BaseRollout)):
        raise TypeError(f"@register_rollout({name!r}) needs a BaseRollout subclass, got {cls!r}")


ROLLOUTS: Registry[type[BaseRollout]] = Registry(
    "rollout engine",
    store=_ROLLOUT_REGISTRY,
    builtin_modules=_BUILTIN_ENGINE_MODULES,
    check=_check_rollout_class,
    same=same_qualname,  # a reloaded module's class is the same engine
    duplicate_error=lambda name, existing, cls: ValueError(
        f"rollout name {name!r} is already registered to {existing.__qualname__}"
    ),
    unknown_error=lambda name, known: ValueError(
        f"unknown rollout engine {name!r} (actor_rollout_ref.rollout.name); known: {known}"
    ),
)
"""The rollout engines by ``actor_rollout_ref.rollout.name`` (the built-in ones imported on first lookup)."""

StepHook = Callable[[int, torch.Tensor, torch.Tensor], "torch.Tensor | None"]
"""Called by a decode loop after each sampled token: ``hook(step, tokens [bs], finished [bs] bool)`` where
``tokens`` are the ids just sampled (the pad id for rows finished earlier) and ``finished`` marks rows that have
produced EOS; returns ``None`` or a ``[bs]`` bool mask of rows to stop now (they continue as padding, as after EOS).
The serving engine streams tokens and cancels requests (time limit, per-request length, stop strings) with it."""


class BaseRollout(ABC):
    """A generation engine: prompts in, one sampled response per row out (see the module docstring)."""

    @abstractmethod
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per prompt row; returns the layout described in the module docstring."""

    def request_server(self, meta_info: dict[str, Any]) -> RequestServer:
        """A server of token requests over this engine for one batch of callers (e.g. the agent loops of
        :class:`~verl.experimental.agent_loop.manager.AgentLoopManager`); the caller closes it.

        ``meta_info`` is the batch's generation meta (sampling settings, ``eos_token_id``, ``pad_token_id``,
        ``seed``, ``validate``). The default batches the waiting requests onto this engine's plain
        :meth:`generate_sequences` (:class:`~verl.workers.rollout.request_server.BatchingRequestServer`); an engine
        with a scheduler of its own serves them request by request (vLLM)."""
        return BatchingRequestServer(self.generate_sequences, meta_info)

    def stay_ready(self) -> AbstractContextManager[Any]:
        """A block in which the engine stays ready to generate between calls (weights loaded, cache allocated):
        several ``generate_sequences`` calls or a request server's requests without sleeping in between. The
        default has nothing to keep; vLLM stays awake (``free_cache_engine`` puts it to sleep after the block)."""
        return nullcontext()

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]] | None = None, **kwargs: Any) -> None:
        """Give the engine the actor's current weights (``(name, tensor)`` pairs under transformers names).

        The default does nothing: an engine that generates with the actor's own module already sees them.
        """
        return None


def register_rollout(name: str) -> Callable[[type[BaseRollout]], type[BaseRollout]]:
    """Class decorator registering a :class:`BaseRollout` subclass under ``name``.

    Registering a different class under a taken name raises ``ValueError`` (re-registering the same class, e.g.
    on module reload, is allowed).
    """

    return ROLLOUTS.decorator(name)


def available_rollouts() -> list[str]:
    """Names that :func:`get_rollout_class` accepts."""
    return ROLLOUTS.names()


def get_rollout_class(name: str) -> type[BaseRollout]:
    """The engine class registered under ``name``; unknown names raise ``ValueError`` listing the known ones."""
    return ROLLOUTS.get(name)


TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"


def rollout_tp_error(tensor_parallel_size: int, world_size: int) -> str | None:
    """Why ``rollout.tensor_model_parallel_size`` cannot run with ``world_size`` actor ranks, or None when it can.

    vLLM runs in every actor process and reuses the actor's torch.distributed world (vLLM's ``external_launcher``):
    its tensor-parallel groups are ``tensor_parallel_size`` consecutive actor ranks, each group one data-parallel
    replica. So the size must divide the number of ranks; with one rank there is no group to split a model over
    (an in-process engine with tp > 1 would need vLLM's worker subprocesses, which the in-place weight sync cannot
    reach).
    """
    tp, world = int(tensor_parallel_size), int(world_size)
    if tp < 1:
        return f"{TP_KEY}={tp} must be >= 1"
    if tp > 1 and world % tp != 0:
        return (
            f"{TP_KEY}={tp} must divide the number of actor ranks ({world}): vLLM's tensor-parallel groups are {tp} "
            f"consecutive actor ranks (trainer.nnodes * trainer.n_gpus_per_node), each group one replica"
        )
    return None


def vllm_usable_for(model_path: str | None, world_size: int, tensor_parallel_size: int = 1) -> tuple[bool, str]:
    """Whether ``rollout.name=auto`` should pick vLLM, and why not when it should not.

    vLLM is chosen when it is installed, ``tensor_parallel_size`` fits the ``world_size`` actor ranks
    (:func:`rollout_tp_error`; every rank runs an engine, inside the actor's torch.distributed world), the model
    comes from a directory (not a user's module object) and, on CPU, the attention head dimension is at least 32
    (vLLM's CPU kernels).
    """
    import importlib.util
    import json
    import os

    if importlib.util.find_spec("vllm") is None:
        return False, "vllm is not installed (pip install -e .[vllm])"
    tp_error = rollout_tp_error(tensor_parallel_size, world_size)
    if tp_error:
        return False, tp_error
    if not model_path or not os.path.isfile(os.path.join(model_path, "config.json")):
        return False, "the actor is not loaded from a model directory"
    with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
        hf_config = json.load(f)
    heads = max(int(hf_config.get("num_attention_heads", 1)), 1)
    head_dim = hf_config.get("head_dim") or hf_config.get("hidden_size", 0) // heads
    if not torch.cuda.is_available() and head_dim < 32:
        return False, f"head dim {head_dim} < 32, below what vLLM's CPU attention supports"
    return True, ""


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling parameters of one ``generate_sequences`` call, after config, validation and overrides."""

    do_sample: bool
    temperature: float
    top_p: float
    top_k: int  # <= 0: off
    response_length: int
    min_new_tokens: int
    calculate_log_probs: bool
    # rollout.ignore_eos (upstream v0.9, vLLM's SamplingParams.ignore_eos): decode to response_length past any EOS;
    # the engines then get no end ids, so the response mask covers every generated token
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        """Greedy decoding: sampling is off or the temperature is zero."""
        return (not self.do_sample) or self.temperature <= 0.0

    @property
    def logprob_temperature(self) -> float:
        """Temperature dividing the logits for ``rollout_log_probs`` (1 when greedy: there is no distribution)."""
        return 1.0 if self.greedy else self.temperature


def resolve_sampling(config: RolloutConfig | Any, meta_info: Mapping[str, Any]) -> SamplingSettings:
    """Combine the rollout config section with a call's ``meta_info``.

    Precedence: ``rollout.*`` < ``rollout.val_kwargs.*`` (when ``meta_info["validate"]``) < explicit
    ``meta_info`` keys ``do_sample``, ``temperature``, ``top_p``, ``top_k``, ``response_length``; log-probs are
    computed when ``rollout.calculate_log_probs`` or ``meta_info["calculate_log_probs"]`` is true.
    """
    validate = bool(meta_info.get("validate", False))
    config = omega_conf_to_dataclass(config, RolloutConfig)  # a partial section: RolloutConfig's defaults
    source = config.val_kwargs if validate else config
    where = "rollout.val_kwargs" if validate else "rollout"

    def pick(key: str) -> tuple[Any, str]:
        if meta_info.get(key) is not None:
            return meta_info[key], f"meta_info[{key!r}]"
        value = source.get(key)
        if value is None:  # a key val_kwargs does not have (response_length), or null there: the rollout's
            value = config.get(key)
        return value, f"{where}.{key}"

    do_sample, _ = pick("do_sample")
    temperature, t_where = pick("temperature")
    top_p, p_where = pick("top_p")
    top_k, k_where = pick("top_k")
    response_length, r_where = pick("response_length")
    min_new_tokens = config.min_new_tokens
    if response_length is None or int(response_length) < 1:
        raise ValueError(f"{r_where}={response_length!r}: the response length must be a positive integer")
    if float(temperature) < 0:
        raise ValueError(f"{t_where}={temperature!r}: temperature must be >= 0")
    if not 0.0 < float(top_p) <= 1.0:
        raise ValueError(f"{p_where}={top_p!r}: top_p must be in (0, 1]")
    if int(top_k) != top_k or int(top_k) < -1:
        raise ValueError(f"{k_where}={top_k!r}: top_k must be an integer >= 1, or -1/0 for off")
    if not 0 <= min_new_tokens <= int(response_length):
        raise ValueError(f"rollout.min_new_tokens={min_new_tokens} must be in [0, response_length={response_length}]")
    return SamplingSettings(
        do_sample=bool(do_sample),
        temperature=float(temperature),
        top_p=float(top_p),
        top_k=int(top_k),
        response_length=int(response_length),
        min_new_tokens=min_new_tokens,
        # a request may ask for log-probs the rollout does not compute (TokenSampling.logprobs)
        calculate_log_probs=bool(meta_info.get("calculate_log_probs") or config.calculate_log_probs),
        ignore_eos=bool(config.ignore_eos),
    )


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [int(v) for v in value]
    return [int(value)]


def resolve_special_ids(
    meta_info: Mapping[str, Any], tokenizer: Any = None, fallback_eos: Any = None
) -> tuple[list[int], int]:
    """EOS ids (a list) and the pad id for a call: ``meta_info`` first, then the tokenizer, then ``fallback_eos``.

    A missing pad id falls back to the first EOS id.
    """
    eos = _as_id_list(meta_info.get("eos_token_id"))
    if not eos and tokenizer is not None:
        eos = _as_id_list(getattr(tokenizer, "eos_token_id", None))
    if not eos:
        eos = _as_id_list(fallback_eos)
    if not eos:
        raise ValueError("no EOS token id: set meta_info['eos_token_id'] or give the rollout a tokenizer")
    pad = meta_info.get("pad_token_id")
    if pad is None and tokenizer is not None:
        pad = getattr(tokenizer, "pad_token_id", None)
    return eos, int(eos[0] if pad is None else pad)


def check_prompts(prompts: DataProto) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The prompt ``input_ids``, ``attention_mask`` and ``position_ids`` ``[bs, prompt_len]`` (computed if absent)."""
    batch = prompts.batch
    if batch is None:
        raise ValueError("generate_sequences: prompts.batch is empty; expected input_ids and attention_mask")
    for key in ("input_ids", "attention_mask"):
        if key not in batch.keys():
            raise ValueError(f"generate_sequences: prompts.batch has no {key!r}; keys: {sorted(batch.keys())}")
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"generate_sequences: input_ids {tuple(input_ids.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} must both be [batch, prompt_len]"
        )
    if bool((attention_mask[:, -1] == 0).any()):
        row = int((attention_mask[:, -1] == 0).nonzero()[0, 0])
        raise ValueError(
            f"generate_sequences: prompt row {row} is not left-padded (attention_mask[:, -1] == 0); prompts must "
            f"be left-padded and non-empty"
        )
    position_ids = batch["position_ids"] if "position_ids" in batch.keys() else None
    if position_ids is None:
        position_ids = compute_position_id_with_mask(attention_mask.long())
    return input_ids, attention_mask, position_ids


def build_rollout_output(
    prompts: DataProto,
    responses: torch.Tensor,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    response_length: int,
    log_probs: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
) -> DataProto:
    """Assemble the rollout output DataProto from generated ``responses [bs, <= response_length]``.

    ``response_mask`` is 1 up to and including the first EOS (and, if ``lengths`` ``[bs]`` is given, only for the
    first ``lengths[i]`` tokens); tokens after it are replaced by ``pad_token_id`` and their log-probs by 0.
    Response positions continue the prompt's: ``position_ids[:, -1:] + 1 .. + response_length``.
    ``non_tensor_batch`` and ``meta_info`` of the prompts are kept.
    """
    input_ids, attention_mask, position_ids = check_prompts(prompts)
    device = input_ids.device
    bs = input_ids.shape[0]
    if responses.shape[0] != bs or responses.shape[1] > response_length:
        raise ValueError(
            f"engine returned responses of shape {tuple(responses.shape)} for {bs} prompts and "
            f"response_length={response_length}"
        )
    responses = pad_sequence_to_length(
        responses.to(device=device, dtype=input_ids.dtype), response_length, pad_token_id
    )
    response_mask = get_response_mask(responses, list(eos_token_ids), dtype=attention_mask.dtype)
    if lengths is not None:
        within = torch.arange(response_length, device=device)[None, :] < lengths.to(device)[:, None]
        response_mask = response_mask * within.to(response_mask.dtype)
    responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, pad_token_id))
    delta = torch.arange(1, response_length + 1, device=device, dtype=position_ids.dtype)
    response_positions = position_ids[:, -1:] + delta[None, :]
    tensors = {
        "prompts": input_ids,
        "responses": responses,
        "input_ids": torch.cat([input_ids, responses], dim=-1),
        "attention_mask": torch.cat([attention_mask, response_mask], dim=-1),
        "position_ids": torch.cat([position_ids, response_positions], dim=-1),
        "response_mask": response_mask,
    }
    if log_probs is not None:
        log_probs = pad_sequence_to_length(log_probs.to(device=device, dtype=torch.float32), response_length, 0.0)
        tensors["rollout_log_probs"] = torch.where(response_mask.bool(), log_probs, torch.zeros_like(log_probs))
    return DataProto.from_dict(
        tensors=tensors, non_tensors=dict(prompts.non_tensor_batch), meta_info=dict(prompts.meta_info)
    )
