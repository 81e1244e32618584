"""What a checkpoint is a checkpoint *of*: recorded in every completion marker, checked before every resume.

Two runs that share a checkpoint root (the same ``trainer.experiment_name``, the same ``default_local_dir``) must not
resume each other's checkpoints: the states of another model do not load (a missing tensor, a shape mismatch), and
the states of another algorithm load but continue the wrong run. Every writer therefore stores a *run identity* in
the step directory's ``checkpoint_complete.json`` (key ``"identity"``, written atomically with the marker)::

    {"format": 1, "trainer": "ppo", "algorithm": "grpo", "lora_rank": 0, "roles": ["actor"],
     "models": {"actor": {"path": "/models/Qwen2.5-0.5B-Instruct", "architectures": ["Qwen2ForCausalLM"],
                          "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
                          ..., "num_parameters": 494032768, "num_parameters_source": "safetensors"}}}

and every reader compares it with the identity of the run about to resume (:func:`check_resume_identity`) before
anything is loaded. The model fingerprint is cheap: ``config.json`` plus the safetensors headers (no weights read).

What counts as "another model" (:func:`compare_identities`):

* refused (both resume modes): another architecture or shape (``architectures``, ``model_type``, the
  :data:`SHAPE_KEYS`, the parameter count), a role this run trains that the checkpoint lacks, another LoRA rank;
* refused under ``resume_mode=auto``, a warning under ``resume_path``: another trainer or algorithm (the states
  load, so a user who names the checkpoint explicitly may continue it under another algorithm);
* a warning naming both: the same shapes under another model path (a fine-tuned copy of the same base);
* a warning, once: a checkpoint written before identities were recorded (it cannot be checked; it resumes).
"""

from __future__ import annotations

import json
import logging
import math
import os
import struct
from collections.abc import Callable, Mapping
from typing import Any

from verl.utils.errors import ConfigError

__all__ = [
    "IDENTITY_FORMAT",
    "IDENTITY_KEY",
    "SHAPE_KEYS",
    "CheckpointMismatchError",
    "check_resume_identity",
    "compare_identities",
    "describe_identity",
    "make_identity",
    "model_fingerprint",
    "model_fingerprint_from_module",
    "model_fingerprint_from_path",
    "read_identity",
]

logger = logging.getLogger(__name__)

IDENTITY_KEY = "identity"
SETTINGS_KEY = "settings"
# settings whose change makes the saved state unloadable (an error under resume_path too)
HARD_SETTINGS = ("data.train_batch_size",)
IDENTITY_FORMAT = 1
# config.json fields that fix the shapes of a decoder's tensors; compared when both sides record them
SHAPE_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "head_dim",
    "tie_word_embeddings",
)
# multimodal configs keep the language model's fields under one of these
_TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config")
_COMPLETE_MARKER = "checkpoint_complete.json"  # layout.COMPLETE_MARKER (layout imports this module)

# warnings already given, so a check repeated for the same directory (driver, then the loader) says it once
_WARNED: set[str] = set()


class CheckpointMismatchError(ConfigError):
    """The checkpoint a run would resume holds another model (or algorithm, roles, LoRA rank) than the run trains.

    A :class:`~verl.trainer.config.validation.ConfigError`, so the entry points print the one-line message and
    exit with code 2, no traceback; ``str(err)`` is that line.
    """

    def __init__(self, message: str) -> None:
        self.problems = [message]
        ValueError.__init__(self, message)


# ------------------------------------------------------------------------------------------ fingerprints
def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a (possibly multimodal) config dict."""
    for key in _TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, Mapping) and "hidden_size" in sub:
            return sub
    return config


def model_fingerprint(
    config: Mapping[str, Any],
    path: str | None = None,
    num_parameters: int | None = None,
    num_parameters_source: str | None = None,
) -> dict[str, Any]:
    """The fingerprint of one model from its config dict (``config.json`` or ``PretrainedConfig.to_dict()``).

    Keeps ``path``, ``architectures``, ``model_type``, the :data:`SHAPE_KEYS` present in the config (a multimodal
    config's text part when it has one), and the parameter count with how it was measured (``safetensors``: the
    headers of the model directory; ``module``: the live module's parameters), since only counts measured the same
    way are compared.
    """
    text = _text_config(config)
    out: dict[str, Any] = {"path": path}
    architectures = config.get("architectures")
    out["architectures"] = list(architectures) if architectures else None
    out["model_type"] = config.get("model_type")
    for key in SHAPE_KEYS:
        value = text.get(key, config.get(key))
        if isinstance(value, (int, float, bool, str)):
            out[key] = value
    if num_parameters is not None:
        out["num_parameters"] = int(num_parameters)
        out["num_parameters_source"] = num_parameters_source
    return out


def _safetensors_num_parameters(model_dir: str) -> int | None:
    """Total element count of every tensor in ``model_dir/*.safetensors``, from the file headers only (the 8-byte
    header length and the JSON header of each file: no tensor data is read). None when there is no such file."""
    try:
        names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    except OSError:
        return None
    if not names:
        return None
    total = 0
    for name in names:
        try:
            with open(os.path.join(model_dir, name), "rb") as f:
                (length,) = struct.unpack("<Q", f.read(8))
                if length > 100 << 20:  # a real header is kilobytes; this is not a safetensors file
                    return None
                header = json.loads(f.read(length))
        except (OSError, struct.error, ValueError):
            return None
        for key, entry in header.items():
            if key != "__metadata__" and isinstance(entry, dict):
                total += math.prod(int(d) for d in entry.get("shape", []))
    return total


def model_fingerprint_from_path(model_dir: str, override_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`model_fingerprint` of a local Hugging Face directory: its ``config.json`` (with ``override_config``
    applied on top, as the loader does) and the parameter count of its safetensors headers. Reads no weights.

    Raises ``FileNotFoundError`` when the directory has no ``config.json``.
    """
    path = os.path.abspath(os.path.expanduser(model_dir))
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    if override_config:
        config.update({k: v for k, v in override_config.items() if not isinstance(v, Mapping)})
    count = _safetensors_num_parameters(path)
    return model_fingerprint(config, path, count, "safetensors" if count is not None else None)


def model_fingerprint_from_module(module: Any, path: str | None = None) -> dict[str, Any]:
    """:func:`model_fingerprint` of a live ``torch.nn.Module`` (the Python API's model objects): its ``config``
    when it has one (``architectures`` defaults to the wrapped class name), and its parameter count."""
    inner = module
    if not type(module).__module__.startswith("transformers."):
        # a wrapper (the API's ActorModel / CriticModel): the wrapped transformers model names the architecture
        for attr in ("hf_model", "model"):
            candidate = getattr(module, attr, None)
            if candidate is not None and callable(getattr(candidate, "parameters", None)):
                inner = candidate
                break
    config_obj = getattr(module, "config", None) or getattr(inner, "config", None)
    config: dict[str, Any] = {}
    if config_obj is not None:
        to_dict = getattr(config_obj, "to_dict", None)
        config = dict(to_dict()) if callable(to_dict) else dict(vars(config_obj))
    if not config.get("architectures"):
        config["architectures"] = [type(inner).__name__]
    if path is None and config_obj is not None:
        path = getattr(config_obj, "name_or_path", None) or None
    try:
        count = sum(p.numel() for p in module.parameters())
    except (AttributeError, TypeError):
        count = None
    return model_fingerprint(config, path, count, "module" if count is not None else None)


def make_identity(
    trainer: str,
    algorithm: str,
    models: Mapping[str, Mapping[str, Any]],
    lora_rank: int = 0,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A run identity: the ``trainer`` (``ppo``, ``sft``, ``dpo``, ``kto``), the ``algorithm`` (the advantage
    estimator of PPO-family runs, else the trainer), ``models`` (role -> :func:`model_fingerprint`; the roles are
    its keys), the LoRA rank (0: full fine-tuning) and ``settings``: ``{config key: value}`` a resume must keep
    (the data order's batch size, shuffle and seed, the training mode), compared when both sides record them."""
    ident = {
        "format": IDENTITY_FORMAT,
        "trainer": str(trainer),
        "algorithm": str(algorithm),
        "lora_rank": int(lora_rank or 0),
        "roles": sorted(models),
        "models": {role: dict(fp) for role, fp in models.items()},
    }
    if settings:
        ident[SETTINGS_KEY] = {str(k): v for k, v in settings.items()}
    return ident


def read_identity(step_dir: str) -> dict[str, Any] | None:
    """The identity recorded in ``step_dir``'s completion marker; None when there is none (older checkpoint)."""
    try:
        with open(os.path.join(step_dir, _COMPLETE_MARKER), encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, ValueError):
        return None
    ident = body.get(IDENTITY_KEY) if isinstance(body, dict) else None
    return ident if isinstance(ident, dict) else None


# ------------------------------------------------------------------------------------------ comparison
def _model_label(fp: Mapping[str, Any]) -> str:
    arch = ",".join(fp.get("architectures") or []) or fp.get("model_type") or "unknown architecture"
    shape = [
        f"{label} {fp[key]}"
        for key, label in (("vocab_size", "vocab"), ("hidden_size", "hidden"), ("num_hidden_layers", "layers"))
        if fp.get(key) is not None
    ]
    if fp.get("num_parameters") is not None:
        shape.append(f"{fp['num_parameters']:,} params")
    return f"{fp.get('path') or '<no path>'} [{arch}{'; ' + ', '.join(shape) if shape else ''}]"


def describe_identity(ident: Mapping[str, Any]) -> str:
    """One line: ``grpo on /models/a [LlamaForCausalLM; vocab 259, hidden 64, layers 2] (roles actor)``."""
    models = ident.get("models") or {}
    first = models.get("actor") or next(iter(models.values()), {})
    extra = [f"roles {'+'.join(ident.get('roles') or sorted(models)) or 'none'}"]
    if int(ident.get("lora_rank") or 0) > 0:
        extra.append(f"LoRA rank {ident['lora_rank']}")
    algo = ident.get("algorithm") or ident.get("trainer") or "?"
    return f"{algo} on {_model_label(first)} ({', '.join(extra)})"


def _shape_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    out = []
    for key in ("architectures", "model_type", *SHAPE_KEYS):
        a, b = saved.get(key), current.get(key)
        if a is not None and b is not None and a != b:
            show = [",".join(map(str, v)) if isinstance(v, (list, tuple)) else v for v in (a, b)]
            out.append(f"{key} {show[0]} vs {show[1]}")
    same_source = saved.get("num_parameters_source") == current.get("num_parameters_source")
    a, b = saved.get("num_parameters"), current.get("num_parameters")
    if same_source and a is not None and b is not None and a != b:
        out.append(f"num_parameters {a} vs {b}")
    return out


def compare_identities(
    saved: Mapping[str, Any], current: Mapping[str, Any], strict_algorithm: bool = True
) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` of resuming a checkpoint with identity ``saved`` in a run with identity ``current``.

    Errors (the states cannot load): a role of ``current`` missing from ``saved``; another architecture or shape
    of a role's model; another LoRA rank; another ``data.train_batch_size`` (the data position cannot load); with
    ``strict_algorithm``, another trainer, algorithm or recorded setting (a warning otherwise). Warnings: the same
    shapes from another model path. Each entry names the role (or the setting) and both values.
    """
    errors: list[str] = []
    warnings: list[str] = []
    for key in ("trainer", "algorithm"):
        a, b = saved.get(key), current.get(key)
        if a is not None and b is not None and a != b:
            (errors if strict_algorithm else warnings).append(f"{key} {a} vs {b}")
    saved_models = saved.get("models") or {}
    current_models = current.get("models") or {}
    missing = sorted(set(current_models) - set(saved_models))
    if missing:
        errors.append(f"roles {'+'.join(sorted(saved_models)) or 'none'} vs {'+'.join(sorted(current_models))}")
    a, b = int(saved.get("lora_rank") or 0), int(current.get("lora_rank") or 0)
    if a != b:
        errors.append(f"lora_rank {a} vs {b}")
    saved_settings, current_settings = saved.get(SETTINGS_KEY) or {}, current.get(SETTINGS_KEY) or {}
    for key in sorted(set(saved_settings) & set(current_settings)):
        a, b = saved_settings[key], current_settings[key]
        if a != b:
            hard = strict_algorithm or key in HARD_SETTINGS
            (errors if hard else warnings).append(f"{key} {a if a != '' else '(none)'} vs {b if b != '' else '(none)'}")
    for role in sorted(set(saved_models) & set(current_models)):
        s, c = saved_models[role], current_models[role]
        diffs = _shape_differences(s, c)
        if diffs:
            errors.append(f"{role}: {', '.join(diffs)}")
        elif s.get("path") and c.get("path") and os.path.normpath(s["path"]) != os.path.normpath(c["path"]):
            warnings.append(f"{role}: model path {s['path']} vs {c['path']} (same architecture and shapes)")
    return errors, warnings


def _fix(mode: str) -> str:
    if mode == "resume_path":
        return (
            "point trainer.resume_from_path at a checkpoint of this run's model, or start fresh with "
            "trainer.resume_mode=disable"
        )
    return (
        "set trainer.experiment_name to a new name, or point trainer.default_local_dir elsewhere (output_dir= in the "
        "Python API), or start over there with trainer.resume_mode=disable trainer.overwrite_checkpoints=true "
        "(deletes its checkpoints)"
    )


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning("%s", message)


def check_resume_identity(
    step_dir: str,
    current: Mapping[str, Any] | Callable[[], Mapping[str, Any] | None] | None,
    mode: str = "auto",
) -> None:
    """Refuse to resume ``step_dir`` when it is a checkpoint of another run than ``current`` describes.

    ``current`` is this run's identity (:func:`make_identity`), or a zero-argument callable returning it (called
    only when the checkpoint records an identity to compare with), or None (nothing to check). ``mode`` is the
    resume mode that chose ``step_dir``: ``auto`` (found by itself under the run's root: another algorithm is an
    error) or ``resume_path`` (named by the user: another algorithm is a warning).

    Raises :class:`CheckpointMismatchError` (one line: the checkpoint, what it holds, what this run trains, why,
    and the fix) before anything is loaded. Logs each warning once per process.
    """
    saved = read_identity(step_dir)
    if saved is None:
        _warn_once(
            f"checkpoint {step_dir} records no run identity (saved before identities were recorded): cannot check "
            "that it is a checkpoint of this run's model; resuming it"
        )
        return
    ident = current() if callable(current) else current
    if ident is None:
        return
    errors, warnings = compare_identities(saved, ident, strict_algorithm=(mode != "resume_path"))
    if errors:
        raise CheckpointMismatchError(
            f"refusing to resume checkpoint {step_dir} (resume_mode={mode}): it holds {describe_identity(saved)}, "
            f"but this run trains {describe_identity(ident)} ({'; '.join(errors)}); {_fix(mode)}"
        )
    for w in warnings:
        _warn_once(f"checkpoint {step_dir} was saved by another run ({w}); resuming it as trainer.resume_mode={mode}")
