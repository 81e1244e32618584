"""Upstream verl module paths for features this project does not have, and what to use instead.

Importing one of them (or a module below it) raises ``ModuleNotFoundError`` (an ``ImportError``) with one line that
says so, instead of Python's bare "No module named ...". A finder appended to ``sys.meta_path`` (installed by
``verl/__init__.py``) answers only for these names, and only after every other finder found nothing, so a module
that exists is never shadowed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["ABSENT_MODULES", "AbsentModuleFinder", "absent_reason", "install"]

_MEGATRON = "Megatron-LM is not supported here (the training backend is FSDP2: actor_rollout_ref.actor.strategy=fsdp2)"
_FSDP_WORKERS = "use verl.workers.fsdp_workers"

_REWARD_INSTEAD = (
    "rewards are computed by the reward managers of verl.workers.reward_manager "
    "(reward_model.reward_manager=naive|batch|dapo|prime|judge, docs/data_and_rewards.md); the per-sample "
    "asynchronous managers are verl.experimental.reward_loop.reward_manager"
)

# upstream module path -> (what it is, what to use instead)
ABSENT_MODULES: dict[str, tuple[str, str]] = {
    "verl.workers.megatron_workers": ("the Megatron-LM workers", f"{_MEGATRON}; {_FSDP_WORKERS}"),
    "verl.workers.actor.megatron_actor": ("the Megatron-LM actor", f"{_MEGATRON}; use verl.workers.actor.dp_actor"),
    "verl.workers.critic.megatron_critic": (
        "the Megatron-LM critic",
        f"{_MEGATRON}; use verl.workers.critic.dp_critic",
    ),
    "verl.utils.megatron_utils": ("Megatron-LM helpers", _MEGATRON),
    "verl.utils.megatron": ("Megatron-LM helpers", _MEGATRON),
    "verl.utils.checkpoint.megatron_checkpoint_manager": (
        "the Megatron-LM checkpoint manager",
        f"{_MEGATRON}; use verl.utils.checkpoint.fsdp_checkpoint_manager.FSDPCheckpointManager",
    ),
    "verl.models.mcore": ("Megatron-core model bridges", _MEGATRON),
    "verl.workers.sharding_manager": (
        "the engine-specific sharding managers (FSDP/Megatron <-> vLLM/SGLang resharding)",
        "weights go from the FSDP2 actor to the rollout engine through verl.workers.rollout.weight_transfer",
    ),
    "verl.workers.rollout.sglang_rollout": (
        "the SGLang rollout",
        "SGLang is not supported; set actor_rollout_ref.rollout.name=vllm (or hf)",
    ),
    "verl.workers.rollout.trtllm_rollout": (
        "the TensorRT-LLM rollout",
        "TensorRT-LLM is not supported; set actor_rollout_ref.rollout.name=vllm (or hf)",
    ),
    "verl.experimental.reward_loop.reward_loop": (
        "upstream's Ray reward-loop workers (RewardLoopManager, RewardLoopWorker)",
        _REWARD_INSTEAD,
    ),
    "verl.experimental.reward_loop.reward_model": ("upstream's reward-model inference servers", _REWARD_INSTEAD),
    "verl.experimental.reward_loop.router": ("upstream's reward-model routers", _REWARD_INSTEAD),
    "verl.experimental.reward_loop.reward_manager.remote": (
        "upstream's remote reward manager (reward calls in Ray actors)",
        "use verl.experimental.reward_loop.reward_manager.naive, or reward_model.num_workers (reward worker "
        "processes) with reward_model.reward_manager=naive",
    ),
    "verl.experimental.reward_loop.reward_manager.gdpo": (
        "upstream's GDPO reward-loop manager class",
        "the trainer's reward.reward_manager.name=gdpo (verl.workers.reward_manager.gdpo) does its work",
    ),
}


def absent_reason(fullname: str) -> str | None:
    """The one-line message for ``fullname`` when it (or a package above it) is listed, else None."""
    for name, (what, instead) in ABSENT_MODULES.items():
        if fullname == name or fullname.startswith(name + "."):
            return f"{fullname} is not provided by this verl: {what} are not implemented here; {instead}"
    return None


class _RaisingLoader(importlib.abc.Loader):
    def __init__(self, message: str) -> None:
        self.message = message

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        raise ModuleNotFoundError(self.message, name=spec.name)

    def exec_module(self, module: ModuleType) -> None:  # pragma: no cover - create_module always raises
        raise ModuleNotFoundError(self.message, name=module.__name__)


class AbsentModuleFinder(importlib.abc.MetaPathFinder):
    """Answers for :data:`ABSENT_MODULES` only (see the module docstring)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        message = absent_reason(fullname)
        if message is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _RaisingLoader(message))


def install() -> None:
    """Append the finder to ``sys.meta_path`` once."""
    if not any(isinstance(f, AbsentModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(AbsentModuleFinder())
