"""The override grammar of every entry point (verl/Hydra-style, one string each), parsed and applied to a config:

* ``a.b.c=value``  set an existing key; ``value`` is parsed as YAML (``16``, ``1e-5``, ``true``, ``null``,
  ``[a,b]``, ``{k: v}``, ``'quoted string'``, ``${other.key}``); an empty value is the empty string.
* ``+a.b.new=value``  add a key that is not in the defaults (an error if it exists); such keys are exempt from the
  unknown-key check.
* ``++a.b.key=value``  set the key, adding it when missing.
* ``~a.b.key``  delete a key.

A schema may declare ``key_aliases`` (``{"critic.model.fsdp_config": "critic.fsdp_config"}``): a key under an alias
(in an override or a user YAML) is moved to its canonical place before anything is applied, so verl scripts that use
another spelling of a section set the same key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config.validation import ConfigError

_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z0-9_\-]+)*$")

OverrideOp = Literal["set", "add", "force_add", "delete"]


@dataclass(frozen=True)
class Override:
    """One parsed command-line override: ``op`` on dotted ``key`` with the YAML-parsed ``value``."""

    op: OverrideOp
    key: str
    value: Any
    text: str


def parse_override(text: str) -> Override:
    """Parse ``[+|++|~]a.b.c[=value]`` into an :class:`Override` (value parsed as YAML).

    Raises:
        ConfigError: naming the override when the key or the value cannot be parsed.
    """
    body = text.strip()
    if body.startswith("~"):
        key = body[1:]
        if "=" in key:
            raise ConfigError(f"override {text!r}: a deletion takes no value; write ~{key.split('=', 1)[0]}")
        _check_key(key, text)
        return Override("delete", key, None, text)
    op: OverrideOp = "set"
    if body.startswith("++"):
        op, body = "force_add", body[2:]
    elif body.startswith("+"):
        op, body = "add", body[1:]
    if "=" not in body:
        raise ConfigError(f"override {text!r}: expected key=value (e.g. data.train_batch_size=32)")
    key, raw = body.split("=", 1)
    key = key.strip()
    _check_key(key, text)
    return Override(op, key, parse_value(raw, text), text)


def _check_key(key: str, text: str) -> None:
    if not _KEY_RE.match(key):
        raise ConfigError(f"override {text!r}: {key!r} is not a dotted key like data.train_batch_size")


def parse_value(raw: str, text: str | None = None) -> Any:
    """Parse the value of an override as YAML: ``'16'`` -> 16, ``'[a,b]'`` -> ['a', 'b'], ``''`` -> ``''``.

    ``${...}`` interpolations are kept as strings (resolved later with the whole config).
    """
    if raw == "":
        return ""
    where = f"override {text!r}" if text is not None else f"value {raw!r}"
    if "\n" in raw:
        raise ConfigError(f"{where}: a value cannot contain a newline")
    try:
        # OmegaConf's YAML loader (unlike plain PyYAML) reads 1e-5 as a float, as the defaults file does.
        parsed = OmegaConf.create("value: " + raw)
    except Exception as e:  # yaml.YAMLError and OmegaConf's errors share no base class
        raise ConfigError(f"{where}: cannot parse {raw!r} as a YAML value ({_first_line(e)})") from e
    return OmegaConf.to_container(parsed, resolve=False)["value"]


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def apply_overrides(cfg: DictConfig, overrides: list[str] | list[Override]) -> set[str]:
    """Apply overrides to ``cfg`` in order; returns the dotted keys added with ``+``/``++`` (exempt from checks).

    Raises:
        ConfigError: listing every override that could not be applied.
    """
    added: set[str] = set()
    problems: list[str] = []
    for item in overrides:
        try:
            ov = item if isinstance(item, Override) else parse_override(item)
            if _apply_one(cfg, ov):
                added.add(ov.key)
        except ConfigError as e:
            problems.extend(e.problems)
    if problems:
        raise ConfigError(problems)
    return added


def _apply_one(cfg: DictConfig, ov: Override) -> bool:
    """Apply one override; returns True when it added a key that was not there."""
    parts = ov.key.split(".")
    parent: Any = cfg
    for i, part in enumerate(parts[:-1]):
        if part not in parent:
            if ov.op == "delete":
                raise ConfigError(f"override {ov.text!r}: {'.'.join(parts[: i + 1])} does not exist")
            break  # OmegaConf.update creates the missing sections
        try:
            parent = parent[part]
        except OmegaConfBaseException:  # a ??? value or a broken interpolation: not a section either way
            parent = None
        if not isinstance(parent, DictConfig):
            where = ".".join(parts[: i + 1])
            raise ConfigError(f"override {ov.text!r}: {where} is a value, not a section, so it has no key {parts[-1]}")
    exists = OmegaConf.select(cfg, ov.key, default=_ABSENT, throw_on_missing=False) is not _ABSENT
    if ov.op == "delete":
        if not exists:
            raise ConfigError(f"override {ov.text!r}: {ov.key} does not exist")
        del parent[parts[-1]]
        return False
    if ov.op == "add" and exists:
        raise ConfigError(
            f"override {ov.text!r}: {ov.key} already exists; drop the + to change it (or use ++ to set-or-add)"
        )
    OmegaConf.update(cfg, ov.key, ov.value, merge=False, force_add=True)
    return ov.op in ("add", "force_add") and not exists


_ABSENT = object()


def rename_aliased_key(key: str, aliases: dict[str, str]) -> str:
    """``key`` with a leading alias path replaced by its canonical path, again until no alias matches (an alias of
    a section can lead to an alias of a key in it: ``critic.fsdp.dtype`` -> ``critic.fsdp_config.dtype`` ->
    ``critic.dtype``); unchanged when none matches."""
    for _ in range(len(aliases) + 1):
        alias = next((a for a in aliases if key == a or key.startswith(a + ".")), None)
        if alias is None:
            return key
        key = aliases[alias] + key[len(alias) :]
    raise ValueError(f"key aliases form a cycle at {key}")


def _alias_overrides(overrides: list[str] | list[Override], aliases: dict[str, str]) -> list[Override]:
    parsed = [item if isinstance(item, Override) else parse_override(item) for item in overrides]
    if not aliases:
        return parsed
    renamed = []
    for ov in parsed:
        key = rename_aliased_key(ov.key, aliases)
        # `+` added the key where the alias is a free-form mapping (+reward_model.reward_kwargs.overlong_buffer_cfg.
        # enable=true); at the canonical key it may already exist: set it, or add it when it does not
        op: OverrideOp = "force_add" if ov.op == "add" and key != ov.key else ov.op
        renamed.append(Override(op, key, ov.value, ov.text))
    return renamed


def _alias_user_yaml(user: DictConfig, aliases: dict[str, str]) -> DictConfig:
    """Move every aliased section of a user YAML to its canonical path (merged over what is already there)."""
    for alias, canonical in aliases.items():
        node = OmegaConf.select(user, alias, default=_ABSENT)
        if node is _ABSENT:
            continue
        parent_key, _, leaf = alias.rpartition(".")
        parent = OmegaConf.select(user, parent_key) if parent_key else user
        del parent[leaf]
        existing = OmegaConf.select(user, canonical, default=None)
        merged = (
            OmegaConf.merge(existing, node)
            if isinstance(existing, DictConfig) and isinstance(node, DictConfig)
            else node
        )
        OmegaConf.update(user, canonical, merged, merge=False, force_add=True)
    return user
