"""Registry of reward managers by name (``reward_model.reward_manager``)."""

from __future__ import annotations

from collections.abc import Callable

REWARD_MANAGER_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make a reward manager available as ``reward_model.reward_manager=<name>``.

    Registering a different class under a taken name raises verl's ``ValueError("Reward manager <name> has already
    been registered: ...")`` (re-registering the same class is allowed, so module reloads are harmless).
    """

    def decorator(cls: type) -> type:
        existing = REWARD_MANAGER_REGISTRY.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ValueError(
                f"Reward manager {name} has already been registered: {existing} vs {cls} "
                f"({existing.__qualname__} holds the name; pick another name)"
            )
        REWARD_MANAGER_REGISTRY[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type:
    """The reward manager class registered as ``name``; an unknown name raises verl's ``ValueError("Unknown reward
    manager: <name>")``, followed here by the config key and the registered names."""
    if name not in REWARD_MANAGER_REGISTRY:
        raise ValueError(
            f"Unknown reward manager: {name}. Set reward_model.reward_manager to one of "
            f"{sorted(REWARD_MANAGER_REGISTRY)} or register a class with @register({name!r})"
        )
    return REWARD_MANAGER_REGISTRY[name]
