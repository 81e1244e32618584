"""Upstream verl v0.9 keys with no setting here: accepted at upstream's default, refused otherwise.

A user's YAML copied from upstream's generated ``ppo_trainer`` config (v0.9, or January 2026's, whose defaults of a
few of these keys differ and are accepted too), or a launch script written against it, carries some 300 keys this
project has no field for: engines it lacks (FSDP Turbo, Megatron-Bridge LoRA, multi-token prediction,
TransferQueue), serving settings of upstream's reward-model and teacher servers, switches of features not
implemented here (router replay, prefill/decode disaggregation, Prometheus). At upstream's default each asks for
what upstream does when the feature is off, which is what runs here, so the key is dropped before validation; a user
who changes one asks for something this project cannot do, and gets one line naming the key, the value, why, and
what to use instead.

The keys, their defaults and the reasons are data (``upstream_data/v09_inert_keys.yaml``). Keys this project honours
are not listed there: they are fields of the typed sections, or aliases of them
(:attr:`verl.trainer.config.schema.PPOConfig.key_aliases`).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from importlib import resources
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

__all__ = ["InertKey", "inert_keys", "settle_inert_keys"]

_DATA = ("verl.trainer.config", "upstream_data/v09_inert_keys.yaml")
_ABSENT = object()


@dataclasses.dataclass(frozen=True)
class InertKey:
    """One upstream key, accepted when it holds ``default`` (upstream v0.9's value) or one of ``also`` (a value that
    runs the same, or the key's default in January 2026, where it differs); or, with
    ``follows`` set, when it holds the value of that key of ours (upstream's default is a copy of it,
    ``${oc.select:<follows>}``). ``why`` is the refusal of any other value."""

    key: str
    default: Any
    why: str
    also: tuple[Any, ...] = ()
    follows: str | None = None

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` (a plain YAML value) is accepted, for a key without ``follows``."""
        return any(_same(value, v) for v in (self.default, *self.also))


@functools.lru_cache(maxsize=1)
def inert_keys() -> dict[str, InertKey]:
    """``{dotted key: InertKey}`` read from the packaged table (the keys that copy another key first)."""
    package, name = _DATA
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    follows: dict[str, InertKey] = {}
    fixed: dict[str, InertKey] = {}
    for group in yaml.safe_load(text):
        why = " ".join(str(group["why"]).split())
        for key, source in (group.get("follows") or {}).items():
            follows[key] = InertKey(key, None, why, follows=source)
        january = group.get("january") or {}
        for key, default in (group.get("keys") or {}).items():
            also = tuple(group.get("also") or ()) + ((january[key],) if key in january else ())
            fixed[key] = InertKey(key, default, why, also)
    # copies are compared while the key they copy is still there (it may itself be an inert key, dropped below)
    return {**follows, **fixed}


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _same(value: Any, default: Any) -> bool:
    """Equal as YAML values (``1`` and ``1.0`` alike; a string spelling of a number is not its number)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    return value == default


def _schema_has(schema: type | None, path: list[str]) -> bool:
    """Whether ``path`` names a declared field of the dataclass ``schema``. Keys inside a free-form mapping field
    (``reward.reward_model.rollout``, ...) are not declared: the section's own checks read those."""
    cls: Any = schema
    for part in path:
        if cls is None:
            return False
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return False
        cls = _dataclass_in(hints[part])
    return True


def _dataclass_in(hint: Any) -> type | None:
    """The dataclass of an annotation (also through ``Optional``), else None."""
    if dataclasses.is_dataclass(hint):
        return hint
    return next((arg for arg in typing.get_args(hint) if dataclasses.is_dataclass(arg)), None)


def _delete(cfg: DictConfig, key: str, schema: type | None) -> None:
    """Remove ``key``, then each parent section left empty that is not a field of ``schema``."""
    parts = key.split(".")
    parent = OmegaConf.select(cfg, ".".join(parts[:-1])) if len(parts) > 1 else cfg
    del parent[parts[-1]]
    for depth in range(len(parts) - 1, 0, -1):
        node = OmegaConf.select(cfg, ".".join(parts[:depth]))
        if not isinstance(node, DictConfig) or len(node) or _schema_has(schema, parts[:depth]):
            return
        above = OmegaConf.select(cfg, ".".join(parts[: depth - 1])) if depth > 1 else cfg
        del above[parts[depth - 1]]


def settle_inert_keys(cfg: DictConfig, schema: type | None, errors: list[str]) -> list[str]:
    """Drop, in place, each listed key that holds upstream's default; one line in ``errors`` for each that holds
    another value (``<key>=<value>: <why>``). Returns the dropped keys.

    A key the schema has a field for is never touched, so a table entry can never hide one of this project's keys.
    """
    dropped: list[str] = []
    for key, entry in inert_keys().items():
        value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
        if value is _ABSENT or _schema_has(schema, key.split(".")):
            continue
        plain = _plain(value)
        if entry.follows is not None:
            source = OmegaConf.select(cfg, entry.follows, default=_ABSENT, throw_on_missing=False)
            expected = None if source is _ABSENT else _plain(source)  # the copy of an absent key is upstream's null
            ok = plain is None or _same(plain, expected)
            default = f"{entry.follows}'s value, {expected}"
        else:
            ok = entry.accepts(plain)
            default = entry.default
        if ok:
            _delete(cfg, key, schema)
            dropped.append(key)
        else:
            errors.append(f"{key}={plain}: {entry.why} (upstream's default: {default})")
    return dropped
