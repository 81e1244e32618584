"""``BaseConfig``: the typed config sections components receive, readable like the mappings verl code expects.

A validated config reaches the workers and the algorithms as dataclass instances (``ActorConfig``,
``RolloutConfig``, ...; see :mod:`verl.workers.config`): attributes are typed, and a default lives in exactly one
place, the dataclass field. Code written for verl's ``DictConfig`` sections keeps working, because a section also
reads as a read-only mapping: ``cfg["clip_ratio"]``, ``cfg.get("clip_ratio", 0.2)``, ``"clip_ratio" in cfg``,
``dict(cfg.items())``. Keys a user added with ``+key=value`` (for a custom loss or reward manager) are kept next to
the fields and read the same ways (``cfg.my_coef``, ``cfg.get("my_coef")``).

:func:`omega_conf_to_dataclass` (verl's name, also at ``verl.utils.config``) builds a section from a
``DictConfig``, a plain dict or another section; missing keys take the dataclass defaults.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import typing
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any, TypeVar

__all__ = ["BaseConfig", "dict_field", "get_config_value", "list_field", "omega_conf_to_dataclass"]

T = TypeVar("T")
_EXTRA = "_extra"
_TARGET = "_target_"


class BaseConfig(Mapping):
    """Mixin of the config dataclasses: fields as attributes, plus a read-only mapping view over fields and extras.

    Subclasses are ordinary ``@dataclass`` classes; this mixin defines no fields, so ``dataclasses.fields`` and
    the validator see exactly the section's keys.

    ``_mutable_fields`` (a class attribute, upstream verl's name): None, the default here, leaves every field
    assignable after construction; a set freezes the section's other fields once ``__init__`` has set them
    (assigning one raises :class:`dataclasses.FrozenInstanceError`, an ``AttributeError``), as upstream's
    ``ActorConfig`` does for all but its batch sizes.
    """

    _mutable_fields: frozenset[str] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        mutable = type(self)._mutable_fields
        if mutable is not None and name not in mutable and name in self.__dict__ and name in _field_names(type(self)):
            raise dataclasses.FrozenInstanceError(
                f"{type(self).__name__}.{name} is fixed once the section is built; only "
                f"{', '.join(sorted(mutable))} may change (build a new section with dataclasses.replace)"
            )
        object.__setattr__(self, name, value)

    # ---------------------------------------------------------------------------------------- extras (+key)
    @property
    def extra(self) -> dict[str, Any]:
        """The keys of this section that are not dataclass fields (added with ``+key=value``)."""
        extra = self.__dict__.get(_EXTRA)
        if extra is None:
            extra = {}
            object.__setattr__(self, _EXTRA, extra)
        return extra

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: a field never gets here
        if name.startswith("__"):
            raise AttributeError(name)
        extra = self.__dict__.get(_EXTRA) or {}
        if name in extra:
            return extra[name]
        raise AttributeError(
            f"{type(self).__name__} has no key {name!r}; its keys: {', '.join(_field_names(type(self)))}"
        )

    # -------------------------------------------------------------------------------------- mapping view
    def __getitem__(self, key: str) -> Any:
        if key in _field_names(type(self)):
            return getattr(self, key)
        extra = self.__dict__.get(_EXTRA) or {}
        if key in extra:
            return extra[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from _field_names(type(self))
        yield from self.__dict__.get(_EXTRA) or {}

    def __len__(self) -> int:
        return len(_field_names(type(self))) + len(self.__dict__.get(_EXTRA) or {})

    def __contains__(self, key: object) -> bool:
        return key in _field_names(type(self)) or key in (self.__dict__.get(_EXTRA) or {})

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (a field or an extra), else ``default``."""
        try:
            return self[key]
        except KeyError:
            return default

    # dataclass(eq=True) defines __eq__ on each subclass; Mapping's __eq__ would compare as dicts
    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict of the section, extras included (for logging, YAML and ``OmegaConf.create``)."""
        out: dict[str, Any] = {}
        for key in self:
            value = self[key]
            out[key] = value.to_dict() if isinstance(value, BaseConfig) else copy.deepcopy(value)
        return out


def list_field(*items: Any) -> Any:
    """A dataclass field whose default is a fresh list of ``items`` (lists are mutable defaults)."""
    return dataclasses.field(default_factory=lambda: list(items))


def dict_field() -> Any:
    """A dataclass field whose default is a fresh empty dict."""
    return dataclasses.field(default_factory=dict)


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@cache
def _nested_types(cls: type) -> dict[str, type]:
    """Fields of ``cls`` whose annotation is itself a config dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])}


def _as_plain(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, BaseConfig):
        return config.to_dict()
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        DictConfig = ()  # noqa: N806
    if isinstance(config, DictConfig):
        return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"a config section must be a mapping, a DictConfig or a dataclass, got {type(config).__name__}")


def _target_class(target: Any, expected: type | None) -> type:
    """The class a ``_target_`` key names (``"verl.workers.config.ActorConfig"``), checked to be a dataclass and,
    when ``expected`` is given, ``expected`` or a subclass of it."""
    module_name, _, attr = str(target).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"_target_={target!r}: cannot import it ({exc})") from exc
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"_target_={target!r} is not a config dataclass")
    if expected is not None and not issubclass(cls, expected):
        raise TypeError(f"_target_={target!r} is not a {expected.__name__} (the type of this section)")
    return cls


def omega_conf_to_dataclass(config: Any, dataclass_type: type[T] | None = None) -> T:
    """``config`` as a ``dataclass_type`` instance (``config`` itself when it already is one).

    ``config`` may be a ``DictConfig``, a dict, another dataclass or None (all defaults). Without
    ``dataclass_type``, the config's ``_target_`` key names the class (upstream verl's convention, e.g.
    ``{"_target_": "verl.workers.config.FSDPActorConfig", ...}``) and a nested section's ``_target_`` picks that
    section's class (the field's type or a subclass of it); with ``dataclass_type`` given, that type and the field
    types decide, as upstream's. ``_target_`` is an instruction, not a key: it is not kept.
    Interpolations are resolved; nested sections become their dataclasses; keys missing from ``config`` take the
    dataclass defaults (the one place they live); keys that are not fields are kept as extras of a
    :class:`BaseConfig` (and dropped for a plain dataclass). This converts, it does not check types: the config
    is validated at the door (:func:`verl.trainer.config.validation.validate_config`).
    """
    if dataclass_type is None:
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            return config  # already typed, no type asked for
        data = _as_plain(config)
        if _TARGET not in data:
            raise TypeError("omega_conf_to_dataclass: give dataclass_type, or a config with a _target_ naming one")
        return _convert(data, _target_class(data[_TARGET], None), by_target=True)
    if isinstance(config, dataclass_type):
        return config  # already typed: the caller's object (copy.deepcopy it for a private, writable copy)
    return _convert(_as_plain(config), dataclass_type, by_target=False)


def _convert(data: dict[str, Any], dataclass_type: type[T], by_target: bool) -> T:
    """:func:`omega_conf_to_dataclass` of a plain dict; ``by_target``: nested ``_target_`` keys pick classes."""
    target = data.pop(_TARGET, None)
    if by_target and target is not None:
        dataclass_type = _target_class(target, dataclass_type)
    kwargs: dict[str, Any] = {}
    nested = _nested_types(dataclass_type)
    names = set(_field_names(dataclass_type))
    for name in _field_names(dataclass_type):
        if name in nested:
            value = data.get(name)
            if isinstance(value, nested[name]):
                kwargs[name] = value
            else:
                kwargs[name] = _convert(_as_plain(value), nested[name], by_target)
        elif name in data:
            kwargs[name] = data[name]
    instance = dataclass_type(**kwargs)
    extra = {k: v for k, v in data.items() if k not in names}
    if extra and isinstance(instance, BaseConfig):
        instance.extra.update(extra)
    return instance


_MISSING = object()


def get_config_value(config: Any, path: str, default: Any = None) -> Any:
    """Read ``path`` (dotted, e.g. ``"policy_loss.clip_cov_ratio"``) from a DictConfig, dict, dataclass or object.

    The one reader for code that accepts a config of any kind, or none (verl's extension points: a user's loss or
    reward manager, the utilities shared by the PPO, SFT and DPO trainers). Attribute and key access both work; a
    missing key, a ``None`` config or a ``None`` value yields ``default``. A component that owns its typed section
    reads attributes instead.
    """
    node = config
    for part in path.split("."):
        if node is None:
            return default
        value = _MISSING
        if isinstance(node, dict):
            value = node.get(part, _MISSING)
        else:
            try:
                value = getattr(node, part)
            except (AttributeError, KeyError):
                getter = getattr(node, "get", None)
                if callable(getter):
                    try:
                        value = getter(part, _MISSING)
                    except Exception:  # noqa: BLE001 - any mapping-like failure means "absent"
                        value = _MISSING
        if value is _MISSING:
            return default
        node = value
    return default if node is None else node
