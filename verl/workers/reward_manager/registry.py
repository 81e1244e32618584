"""Registry of reward managers by name (``reward_model.reward_manager``)."""

from __future__ import annotations

from collections.abc import Callable

REWARD_MANAGER_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make a reward manager available as ``reward_model.reward_manager=<name>``.

    Registering a different class under a taken name raises ValueError (re-registering the same class is allowed,
    so module reloads are harmless).
    """

    def decorator(cls: type) -> type:
        existing = REWARD_MANAGER_REGISTRY.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ValueError(f"reward manager {name!r} is already registered to {existing.__qualname__}")
        REWARD_MANAGER_REGISTRY[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type:
    """The reward manager class registered as ``name``; unknown names raise ValueError listing the known ones."""
    if name not in REWARD_MANAGER_REGISTRY:
        raise ValueError(f"unknown reward manager {name!r}; registered: {sorted(REWARD_MANAGER_REGISTRY)}")
    return REWARD_MANAGER_REGISTRY[name]
