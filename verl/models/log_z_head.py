"""FlowRL's learned log-partition head: a small MLP from a prompt's mean hidden state to ``log Z(x)``.

FlowRL (Zhu et al., 2025, arXiv:2509.15207; verl-recipe's ``flowrl`` recipe) turns the scalar reward into a target
distribution ``exp(beta * r(x, y)) / Z(x)`` and fits the policy to it with a trajectory-balance loss, in which
``log Z(x)`` is learned per prompt by this head. It is a submodule of the actor's model under the recipe's name
:data:`LOG_Z_HEAD` (``proj_z``), so the optimizer, the checkpoint shards and a resume carry it with the policy's
weights; but it is training-only: the rollout engine's weight sync, the Hugging Face export and the model merger
leave it out (:func:`is_training_only`), since the exported model is the policy alone.

Architecture (the recipe's ``ProjZModule``): ``layers - 1`` blocks of ``Linear(H, H) -> GELU -> LayerNorm ->
Dropout`` and a final ``Linear(H, 1)``; ``H`` is the model's hidden size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

import torch

__all__ = [
    "LOG_Z_HEAD",
    "LogPartitionHead",
    "attach_log_z_head",
    "is_training_only",
    "log_z_head_of",
    "without_training_only",
]

LOG_Z_HEAD = "proj_z"  # the recipe's attribute name, kept so its checkpoints' tensor names read the same
T = TypeVar("T")


class LogPartitionHead(torch.nn.Module):
    """``[bs, H] -> [bs, 1]``: the log-partition estimate of each prompt from its pooled hidden state."""

    def __init__(self, hidden_size: int, layers: int = 3, dropout: float = 0.1) -> None:
        super().__init__()
        if int(layers) < 1:
            raise ValueError(f"the log Z head needs at least one layer, got {layers}")
        blocks: list[torch.nn.Module] = []
        for _ in range(int(layers) - 1):
            blocks += [
                torch.nn.Linear(hidden_size, hidden_size),
                torch.nn.GELU(),
                torch.nn.LayerNorm(hidden_size),
                torch.nn.Dropout(dropout),
            ]
        blocks.append(torch.nn.Linear(hidden_size, 1))
        self.net = torch.nn.Sequential(*blocks)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.net(pooled)


def _hidden_size(module: torch.nn.Module) -> int:
    config = getattr(module, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    size = getattr(config, "hidden_size", None)
    if size is None:
        raise ValueError(
            f"loss_mode=flowrl needs a transformers model (its config's hidden_size sizes the log Z head); "
            f"{type(module).__name__} has none"
        )
    return int(size)


def attach_log_z_head(module: torch.nn.Module, layers: int, dropout: float) -> LogPartitionHead:
    """Add a fresh :class:`LogPartitionHead` to ``module`` as ``module.proj_z`` (float32, on the module's device);
    a head already there (a resumed or given module) is kept. Call before sharding, so FSDP2 shards it with the
    model's root parameters."""
    existing = getattr(module, LOG_Z_HEAD, None)
    if isinstance(existing, LogPartitionHead):
        return existing
    device = next(module.parameters()).device
    head = LogPartitionHead(_hidden_size(module), layers, dropout).to(device=device, dtype=torch.float32)
    module.add_module(LOG_Z_HEAD, head)
    return head


def log_z_head_of(module: torch.nn.Module) -> torch.nn.Module:
    """The log Z head of an actor's model (under a compile wrapper too); a clear error when there is none."""
    inner = getattr(module, "_orig_mod", module)
    head = getattr(inner, LOG_Z_HEAD, None)
    if head is None:
        raise RuntimeError(
            "loss_mode=flowrl: the actor's model has no log Z head (proj_z); the actor worker adds it when it builds "
            "a FlowRL actor (verl.models.log_z_head.attach_log_z_head for a model of your own)"
        )
    return head


def is_training_only(name: str) -> bool:
    """Whether a parameter name (full, as in the model's state dict) belongs to a training-only head, which the
    rollout engine, the Hugging Face export and the merger leave out."""
    return name == LOG_Z_HEAD or name.startswith(LOG_Z_HEAD + ".")


def without_training_only(items: Iterable[tuple[str, T]]) -> Iterator[tuple[str, T]]:
    """``(name, value)`` pairs of ``items`` but those of a training-only head (lazily: a gathering iterator's other
    tensors are still pulled in order)."""
    return ((name, value) for name, value in items if not is_training_only(name))
