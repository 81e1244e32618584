"""Registry of reward managers by name (``reward_model.reward_manager``), a :class:`~verl.utils.registry.Registry`."""

from __future__ import annotations

from collections.abc import Callable

from verl.utils.errors import ConfigLineError
from verl.utils.registry import Registry, same_qualname

REWARD_MANAGER_REGISTRY: dict[str, type] = {}
"""Name -> reward manager class (the entries of :data:`REWARD_MANAGERS`)."""

REWARD_MANAGERS: Registry[type] = Registry(
    "reward manager",
    store=REWARD_MANAGER_REGISTRY,
    same=same_qualname,  # a reloaded module's class is the same manager
    duplicate_error=lambda name, existing, cls: ValueError(
        f"Reward manager {name} has already been registered: {existing} vs {cls} "
        f"({existing.__qualname__} holds the name; pick another name)"
    ),
    # a ConfigError (a ValueError): the entry points print it without a traceback and exit 2 before models load
    unknown_error=lambda name, known: ConfigLineError(
        f"Unknown reward manager: {name}. Set reward.reward_manager.name (reward_model.reward_manager) to one of "
        f"{known} or register a class with @register({name!r})"
    ),
)


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make a reward manager available as ``reward_model.reward_manager=<name>``.

    Registering a different class under a taken name raises verl's ``ValueError("Reward manager <name> has already
    been registered: ...")`` (re-registering the same class is allowed, so module reloads are harmless).
    """
    return REWARD_MANAGERS.decorator(name)


def get_reward_manager_cls(name: str) -> type:
    """The reward manager class registered as ``name``; an unknown name raises verl's ``ValueError("Unknown reward
    manager: <name>")``, followed here by the config key and the registered names."""
    return REWARD_MANAGERS.get(name)
