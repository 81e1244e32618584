"""Registry of reward-loop managers by name (verl's ``verl.experimental.reward_loop.reward_manager.registry``).

A separate name space from :mod:`verl.workers.reward_manager.registry`: the reward-loop managers have the
``(config, tokenizer, compute_score)`` constructor and the asynchronous ``run_single``.
"""

from __future__ import annotations

from collections.abc import Callable

from verl.utils.registry import Registry, same_qualname

__all__ = ["REWARD_MANAGER", "get_reward_manager_cls", "register"]

REWARD_MANAGER: dict[str, type] = {}
"""Name -> reward-loop manager class."""

_MANAGERS: Registry[type] = Registry(
    "reward-loop manager",
    store=REWARD_MANAGER,
    same=same_qualname,  # a reloaded module's class is the same manager
    duplicate_error=lambda name, existing, cls: ValueError(
        f"reward manager {name} has already been registered: {existing} vs {cls}"
    ),
    unknown_error=lambda name, known: ValueError(
        f"Unknown reward manager: {name}; the reward-loop managers are {known} (or register a class with "
        f"@register({name!r}))"
    ),
)


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make a reward-loop manager available under ``name`` (a different class under a taken name
    raises ``ValueError``; re-registering the same class is allowed)."""
    return _MANAGERS.decorator(name)


def get_reward_manager_cls(name: str) -> type:
    """The reward-loop manager class registered as ``name`` (``ValueError`` naming the registered ones if none)."""
    return _MANAGERS.get(name)
