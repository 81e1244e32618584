"""verl's ``verl.utils.*`` paths of the packages that moved out of ``verl/utils`` into rooms of their own.

Upstream verl keeps checkpoints, datasets, reward scoring, tracking, model loading and the like under
``verl.utils``; here each has a top-level package (:data:`MOVED`). Code ported from verl still imports the old
paths, so a finder placed first on ``sys.meta_path`` answers for them: ``import verl.utils.reward_score.gsm8k``
imports ``verl.rewards.gsm8k`` and binds the SAME module object under the old name too. One object under two names
means ``isinstance`` checks, ``monkeypatch.setattr("verl.utils.tracking.backends.f", ...)`` and ``mock.patch`` act
on the code that runs, and nothing is executed twice. ``python -m verl.utils.<old>`` runs the new module's code.

Outside ``verl.utils`` the same finder keeps verl's paths of modules that live on another floor here
(:data:`RELOCATED`): the asynchronous trainers subclass the PPO driver, so they live in ``verl/trainer`` while
``verl.experimental.fully_async_policy`` and ``verl.experimental.one_step_off_policy`` name them; the typed sections
that the algorithms, the optimizer helpers and the judge read live on the ground floor (``verl/sections``) while
``verl.workers.config.<module>`` names them. ``verl/__init__.py`` installs the finder, so these paths resolve from
any first import.

The finder answers only for names under a prefix of :data:`MOVED`, :data:`ALIASES` or :data:`RELOCATED`; nothing is
imported until such a name is.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import CodeType, ModuleType

__all__ = ["ALIASES", "MOVED", "RELOCATED", "MovedModuleFinder", "install", "new_name"]

# verl's (upstream's) module path -> where the module lives here. A longer prefix wins over a shorter one.
MOVED: dict[str, str] = {
    "verl.utils.checkpoint": "verl.checkpoint",
    "verl.utils.dataset.arithmetic": "verl.data.arithmetic_task",
    "verl.utils.dataset": "verl.data",
    "verl.utils.reward_score.math_reward": "verl.rewards.math",  # upstream v0.9's name of math.py
    "verl.utils.reward_score": "verl.rewards",
    "verl.utils.tracking": "verl.reporting",
    "verl.utils.metric": "verl.reporting.metric",
    "verl.utils.sandbox": "verl.sandbox",
    "verl.utils.models": "verl.models",
    "verl.utils.hardware": "verl.hardware",
    "verl.utils.profiler": "verl.hardware.profiler",
    "verl.utils.flops_counter": "verl.hardware.flops_counter",
}

# documented import paths that name a module living elsewhere (served like MOVED; not rewritten by
# scripts/rewrite_moved_imports.py, since the documents use them)
ALIASES: dict[str, str] = {
    "verl.utils.evaluation": "verl.api.evaluation",  # the evaluator base class and built-ins (docs/api.md)
}

# verl's module paths outside ``verl.utils`` whose module lives on another floor here (served like MOVED; the code
# here imports the new paths, verl's launch scripts and ported code the old ones)
SECTION_MODULES = (
    "actor",
    "actor_rollout_ref",
    "critic",
    "distillation",
    "engine",
    "literals",
    "model",
    "optimizer",
    "profiler",
    "reward_model",
    "rollout",
)
RELOCATED: dict[str, str] = {
    "verl.experimental.fully_async_policy": "verl.trainer.fully_async_policy",
    "verl.experimental.one_step_off_policy": "verl.trainer.one_step_off_policy",
    **{f"verl.workers.config.{name}": f"verl.sections.{name}" for name in SECTION_MODULES},
}

_BY_LENGTH = sorted({**MOVED, **ALIASES, **RELOCATED}.items(), key=lambda item: len(item[0]), reverse=True)


def new_name(fullname: str) -> str | None:
    """The module path that ``fullname`` (an old ``verl.utils.*`` path, one of :data:`ALIASES` or of
    :data:`RELOCATED`) names today, or None if it did not move.

    ``new_name("verl.utils.reward_score.gsm8k") == "verl.rewards.gsm8k"``; a prefix matches whole dotted parts only
    (``verl.utils.metrics`` is not under ``verl.utils.metric``).
    """
    for old, new in _BY_LENGTH:
        if fullname == old:
            return new
        if fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Hands out the module already imported (or imported now) under its new name."""

    def __init__(self, target: str, target_spec: importlib.machinery.ModuleSpec) -> None:
        self.target = target
        self.target_spec = target_spec
        self._own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system stamped the alias spec on the module: give it back its own (``module.__spec__.name`` is
        # the new path, as for any module imported under that name)
        module.__spec__ = self._own_spec

    def get_code(self, fullname: str) -> CodeType | None:
        """The new module's code (``runpy``, i.e. ``python -m verl.utils.<old>``, runs it under ``__main__``)."""
        loader = self.target_spec.loader
        get_code = getattr(loader, "get_code", None)
        if get_code is None:
            raise ImportError(f"{self.target} has no code object to run (loader {loader!r})", name=fullname)
        return get_code(self.target)

    def is_package(self, fullname: str) -> bool:
        return self.target_spec.submodule_search_locations is not None


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Answers for the old paths of :data:`MOVED`, :data:`ALIASES` and :data:`RELOCATED` only (see the module
    docstring)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname)
        if new is None:
            return None
        target_spec = importlib.util.find_spec(new)
        if target_spec is None:  # no such module at the new path either: the later finders (absent modules) answer
            return None
        spec = importlib.machinery.ModuleSpec(
            fullname, _AliasLoader(new, target_spec), is_package=target_spec.submodule_search_locations is not None
        )
        if target_spec.submodule_search_locations is not None:
            spec.submodule_search_locations = list(target_spec.submodule_search_locations)
        return spec


def install() -> None:
    """Put the finder first on ``sys.meta_path`` once (before the path finder, which would load a second copy of a
    moved module from the new package's directory under the old name)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
