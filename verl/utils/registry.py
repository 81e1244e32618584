"""One name -> object registry, the helper behind verl's extension points (rollout engines, agent loops, reward
managers, advantage estimators, policy losses, tool-call formats, function tools).

A :class:`Registry` maps names to objects (classes or functions). Code registers with the decorator
(``@registry.decorator("name")``) or :meth:`Registry.register`; lookups go through :meth:`Registry.get`. It gives
every registry the same rules:

* a second, *different* object under a taken name is refused with one error naming both (the same object again, or
  the same definition re-executed by a module reload, is a no-op); a registry built with ``replace=True`` lets the
  newer object win instead (verl's policy losses: a recipe may override a built-in);
* an unknown name is refused with one error listing the known names;
* built-in entries can live in modules imported only on first lookup (``builtin_modules``), so optional
  dependencies stay optional and the registry's module stays below the modules that register into it.

Each registry keeps verl's wording for its errors through the ``duplicate_error`` / ``unknown_error`` hooks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "same_definition", "same_qualname"]

T = TypeVar("T")


def same_definition(a: Any, b: Any) -> bool:
    """True for the same object, or the same definition executed again (a module reload, a notebook cell re-run):
    same module, qualified name, and (for functions) source file and first line."""
    if a is b:
        return True
    if getattr(a, "__module__", None) != getattr(b, "__module__", None):
        return False
    if getattr(a, "__qualname__", None) != getattr(b, "__qualname__", None) or getattr(a, "__qualname__", None) is None:
        return False
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if code_a is None or code_b is None:
        return code_a is None and code_b is None  # classes: module and qualname decide
    return code_a.co_filename == code_b.co_filename and code_a.co_firstlineno == code_b.co_firstlineno


def same_qualname(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` have the same ``__qualname__`` (the looser rule some registries kept)."""
    return a is b or getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)


def describe(obj: Any) -> str:
    """``module.QualName`` of a class or function, else its repr."""
    qualname = getattr(obj, "__qualname__", None)
    return f"{getattr(obj, '__module__', '?')}.{qualname}" if qualname else repr(obj)


class Registry(Generic[T]):
    """Name -> object (see the module docstring).

    Args:
        kind: what the entries are, for the default messages (``"rollout engine"``).
        builtin_modules: modules that register built-in entries when imported: a sequence (all imported before the
            first lookup or listing) or a mapping name -> module (only the module of the looked-up name imported;
            its names are listed as known before it is).
        check: called with ``(name, obj)`` before registering (raise to refuse, e.g. a wrong base class).
        same: whether two objects under one name are the same entry (default :func:`same_definition`).
        replace: a different object under a taken name replaces the entry instead of being refused.
        duplicate_error: ``(name, registered, new) -> Exception`` (default: names both, ``ValueError``).
        unknown_error: ``(name, known names) -> Exception`` (default: lists the known, ``ValueError``).
        store: the dict the entries live in (default a new one), or a callable returning it at each access (for a
            module global that code may rebind, as verl's ``core_algos.ADV_ESTIMATOR_REGISTRY``).
    """

    def __init__(
        self,
        kind: str,
        *,
        builtin_modules: Sequence[str] | Mapping[str, str] = (),
        check: Callable[[str, Any], None] | None = None,
        same: Callable[[Any, Any], bool] = same_definition,
        replace: bool = False,
        duplicate_error: Callable[[str, T, T], Exception] | None = None,
        unknown_error: Callable[[str, list[str]], Exception] | None = None,
        store: MutableMapping[str, T] | Callable[[], MutableMapping[str, T]] | None = None,
    ) -> None:
        self.kind = kind
        self.builtin_modules = builtin_modules
        self._check = check
        self._same = same
        self._replace = replace
        self._duplicate_error = duplicate_error
        self._unknown_error = unknown_error
        self._store: MutableMapping[str, T] | Callable[[], MutableMapping[str, T]] = {} if store is None else store

    # ------------------------------------------------------------------------------------------------ storage
    @property
    def entries(self) -> MutableMapping[str, T]:
        """The dict the entries live in now (no built-in module is imported)."""
        store = self._store
        return store() if callable(store) else store  # type: ignore[return-value]

    def load_builtins(self, name: str | None = None) -> None:
        """Import the built-in modules: the one of ``name`` for a mapping (all when ``name`` is None), every one
        for a sequence."""
        if isinstance(self.builtin_modules, Mapping):
            modules = (
                list(self.builtin_modules.values())
                if name is None
                else [self.builtin_modules[name]]
                if name in self.builtin_modules and name not in self.entries
                else []
            )
        else:
            modules = list(self.builtin_modules)
        for module in modules:
            importlib.import_module(module)

    # ------------------------------------------------------------------------------------------- registering
    def register(self, name: str, obj: T) -> T:
        """Add ``obj`` under ``name`` and return it (see the class docstring for a taken name)."""
        if self._check is not None:
            self._check(name, obj)
        entries = self.entries
        existing = entries.get(name)
        if existing is not None and not self._replace and not self._same(existing, obj):
            raise self.duplicate_error(name, existing, obj)
        entries[name] = obj
        return obj

    def decorator(self, name: str) -> Callable[[T], T]:
        """``@registry.decorator(name)``: registers the decorated class or function, which is returned unchanged."""

        def decorate(obj: T) -> T:
            return self.register(name, obj)

        return decorate

    def duplicate_error(self, name: str, existing: T, new: T) -> Exception:
        """The error for ``new`` under ``name`` already held by ``existing``."""
        if self._duplicate_error is not None:
            return self._duplicate_error(name, existing, new)
        return ValueError(
            f"{self.kind} {name!r} is already registered to {describe(existing)}; {describe(new)} needs another name"
        )

    # ------------------------------------------------------------------------------------------------ lookups
    def get(self, name: str) -> T:
        """The entry under ``name`` (its built-in module imported first); an unknown name raises the registry's
        error listing :meth:`names`."""
        self.load_builtins(name)
        entries = self.entries
        if name not in entries:
            raise self.unknown_error(name)
        return entries[name]

    def unknown_error(self, name: str) -> Exception:
        """The error for a name nothing is registered under."""
        known = self.names()
        if self._unknown_error is not None:
            return self._unknown_error(name, known)
        return ValueError(f"unknown {self.kind} {name!r}; known: {known}")

    def names(self) -> list[str]:
        """The known names, sorted: the registered ones and, for a mapping of built-in modules, those it names
        (a sequence of built-in modules is imported first)."""
        if not isinstance(self.builtin_modules, Mapping):
            self.load_builtins()
            return sorted(self.entries)
        return sorted(set(self.entries) | set(self.builtin_modules))

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.entries))

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self.entries)})"
