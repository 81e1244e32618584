"""The security switches of a run and the guards that enforce them.

``trainer.allow_unsafe_operations`` (default ``false``) decides whether anything may run model output as code in
this process or unpickle arbitrary objects. With it off:

- answer parsing never calls ``eval``/``exec`` (use :func:`parse_literal`, which only reads Python literals);
- code-execution rewards run only in a sandboxed subprocess (:mod:`verl.sandbox`);
- checkpoints and data load without unpickling arbitrary objects: safetensors, or ``torch.load(weights_only=True)``
  through :func:`safe_torch_load`.

Every refusal raises :class:`UnsafeOperationError` whose message names the operation and the switch that allows it.
The policy of the process is set once by the driver (:func:`set_security_policy`) and also published through the
``VERL_ALLOW_UNSAFE_OPERATIONS`` environment variable, so worker processes started afterwards inherit it.
"""

from __future__ import annotations

import ast
import os
import pickle
from dataclasses import dataclass, field
from typing import Any

import torch

from verl.base_config import get_config_value, omega_conf_to_dataclass

__all__ = [
    "ENV_ALLOW_UNSAFE",
    "SecurityPolicy",
    "UnsafeOperationError",
    "get_security_policy",
    "parse_literal",
    "require_unsafe",
    "safe_torch_load",
    "set_security_policy",
]

ENV_ALLOW_UNSAFE = "VERL_ALLOW_UNSAFE_OPERATIONS"
SWITCH = "trainer.allow_unsafe_operations"


class UnsafeOperationError(PermissionError):
    """An operation refused because ``trainer.allow_unsafe_operations`` is off."""


@dataclass(frozen=True)
class SecurityPolicy:
    """The four switches of ``trainer`` (all off by default).

    Attributes:
        allow_unsafe_operations: permit in-process execution of model output and unrestricted unpickling.
        enable_debug_mode: anomaly detection and per-step debug dumps.
        enable_profiling: torch.profiler traces for ``profile_steps``.
        profile_steps: the global steps to trace (empty: every step).
    """

    allow_unsafe_operations: bool = False
    enable_debug_mode: bool = False
    enable_profiling: bool = False
    profile_steps: tuple[int, ...] = field(default_factory=tuple)

    @classmethod
    def from_config(cls, config: Any) -> SecurityPolicy:
        """Read the switches from a full run config (with a ``trainer`` section), the ``trainer`` section itself,
        a plain dict or a dataclass; missing keys keep their safe defaults (this dataclass's fields)."""
        section = get_config_value(config, "trainer", None)
        trainer = omega_conf_to_dataclass(section if section is not None else config, cls)
        steps = trainer.profile_steps
        try:
            profile_steps = tuple(int(s) for s in steps or ())  # null in YAML: every step, as an empty list
        except (TypeError, ValueError) as e:
            raise ValueError(f"trainer.profile_steps must be a list of step numbers, got {steps!r}") from e
        return cls(
            allow_unsafe_operations=trainer.allow_unsafe_operations,
            enable_debug_mode=trainer.enable_debug_mode,
            enable_profiling=trainer.enable_profiling,
            profile_steps=profile_steps,
        )

    def require_unsafe(self, what: str) -> None:
        """Raise :class:`UnsafeOperationError` naming ``what`` unless unsafe operations are allowed."""
        if not self.allow_unsafe_operations:
            raise UnsafeOperationError(
                f"refused: {what} is an unsafe operation (it can run arbitrary code); it is allowed only with "
                f"{SWITCH}=true, which you should set only for code and files you trust"
            )


_policy: SecurityPolicy | None = None


def set_security_policy(policy: SecurityPolicy) -> None:
    """Install ``policy`` for this process and publish the unsafe switch to child processes via the environment."""
    global _policy
    _policy = policy
    os.environ[ENV_ALLOW_UNSAFE] = "1" if policy.allow_unsafe_operations else "0"


def get_security_policy() -> SecurityPolicy:
    """The installed policy; without one, the environment variable (set by a parent driver) or the safe default."""
    if _policy is not None:
        return _policy
    allowed = os.environ.get(ENV_ALLOW_UNSAFE, "0").strip().lower() in ("1", "true", "yes")
    return SecurityPolicy(allow_unsafe_operations=allowed)


def require_unsafe(what: str, policy: SecurityPolicy | None = None) -> None:
    """Refuse ``what`` (raise :class:`UnsafeOperationError`) unless ``policy`` (default: the process policy)
    allows unsafe operations."""
    (policy or get_security_policy()).require_unsafe(what)


def safe_torch_load(
    path: str,
    map_location: str | torch.device = "cpu",
    *,
    weights_only: bool = True,
    policy: SecurityPolicy | None = None,
) -> Any:
    """``torch.load`` that never unpickles arbitrary objects unless unsafe operations are allowed.

    ``weights_only=True`` (the default) loads only tensors and plain Python containers. Asking for
    ``weights_only=False`` goes through :func:`require_unsafe`. A file that needs arbitrary unpickling raises
    :class:`UnsafeOperationError` naming the file; a missing or corrupt file raises an error naming it too.
    """
    path = os.fspath(path)
    if not weights_only:
        require_unsafe(f"torch.load({path!r}, weights_only=False) (unpickling arbitrary objects)", policy)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"safe_torch_load: file not found: {path}")
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as e:
        # "Unsupported global" is torch's marker for a class outside the weights-only allowlist; anything else
        # (e.g. "Unsupported operand") means the bytes are not a valid checkpoint at all
        if "Unsupported global" in str(e) or "safe_globals" in str(e):
            raise UnsafeOperationError(
                f"refused to load {path}: it holds objects that only arbitrary unpickling can rebuild (not just "
                f"tensors and plain containers); loading it with weights_only=False needs {SWITCH}=true and a "
                f"file you trust. Details: {' '.join(str(e).split())[:300]}"
            ) from e
        raise ValueError(f"{path} is corrupt or not a torch.save file: {e}") from e
    except (RuntimeError, EOFError) as e:
        raise ValueError(f"{path} is corrupt or truncated: {e}") from e


def parse_literal(text: str) -> Any:
    """Parse ``text`` as a Python literal (numbers, strings, tuples, lists, dicts, sets, booleans, None).

    The safe replacement for ``eval`` when reading answers or test cases written by a model or a dataset: names,
    calls, attribute access and operators other than unary minus / complex literals are rejected with a
    ValueError quoting the text.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_literal expects a string, got {type(text).__name__}")
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"not a Python literal: {text[:200]!r} ({type(e).__name__})") from e
