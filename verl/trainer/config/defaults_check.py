"""Check the defaults lists of a user's YAML files before Hydra composes them, with one-line errors.

Hydra reports a missing config as a multi-line message naming the config that *contains* the override (often a
packaged one) and the whole search path. Here every entry of the user's primary YAML, of the user's files it pulls
in (recursively), and every config-group choice on the command line is looked up first, so a bad entry is reported
as ``config file run.yaml: defaults entry 'actor@actor_rollout_ref.actor: megatron_actor': no option
'megatron_actor' in group 'actor' (available: dp_actor)``.

The same walk collects the dotted keys the user's files set (with the package each file is merged at), which the
loader's adapt-defaults step treats as chosen by the user.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.validation import ConfigError

# Upstream verl options and groups that select machinery this implementation does not have: named in the error.
_UNAVAILABLE = {
    "megatron_actor": "Megatron-LM is not implemented here (actor.strategy fsdp/fsdp2)",
    "megatron_ref": "Megatron-LM is not implemented here",
    "megatron_critic": "Megatron-LM is not implemented here",
    "megatron_reward_model": "Megatron-LM is not implemented here",
    "npu_profile": "NPU profiling is not implemented here",
    "profiler": "upstream's profiler configs are not implemented here (trainer.enable_profiling)",
}


@dataclass
class ConfigSources:
    """Where configs can come from: the user's directories, and the packaged names and groups (ConfigStore)."""

    packaged_names: set[str]
    packaged_groups: dict[str, set[str]]
    user_dirs: list[str] = field(default_factory=list)

    def find_file(self, path: str) -> str | None:
        """The user's ``<dir>/<path>.yaml`` (first directory that has it), or None."""
        for d in self.user_dirs:
            candidate = os.path.join(d, f"{path}.yaml")
            if os.path.isfile(candidate):
                return candidate
        return None

    def exists(self, path: str) -> bool:
        if self.find_file(path):
            return True
        group, _, name = path.rpartition("/")
        return name in (self.packaged_groups.get(group, set()) if group else self.packaged_names)

    def options(self, group: str) -> list[str]:
        found = set(self.packaged_groups.get(group, set()))
        for d in self.user_dirs:
            gdir = os.path.join(d, group)
            if os.path.isdir(gdir):
                found.update(f[: -len(".yaml")] for f in os.listdir(gdir) if f.endswith(".yaml"))
        return sorted(found)

    def groups(self) -> list[str]:
        found = set(self.packaged_groups)
        for d in self.user_dirs:
            if os.path.isdir(d):
                found.update(f for f in os.listdir(d) if os.path.isdir(os.path.join(d, f)) and not f.startswith("."))
        return sorted(found)


@dataclass(frozen=True)
class _Entry:
    text: str  # as the user wrote it, for messages
    group: str | None  # None: a config entry (no group)
    name: Any  # option name(s) or config path; None / '???' for "no choice"
    package: str | None
    optional: bool
    override: bool


def _parse_entry(item: Any) -> _Entry | None:
    if isinstance(item, str):
        if item == "_self_":
            return None
        path, _, pkg = item.partition("@")
        return _Entry(item, None, path, pkg or None, False, False)
    if isinstance(item, dict) and len(item) == 1:
        ((key, value),) = item.items()
        words = str(key).split()
        flags = set(words[:-1])
        group, _, pkg = words[-1].partition("@")
        text = f"{key}: {value}"
        return _Entry(text, group, value, pkg or None, "optional" in flags, "override" in flags)
    raise ConfigError(f"defaults entry {item!r}: expected a name or a 'group: option' mapping")


def _join(base: str, path: str) -> str:
    if path.startswith("/"):
        return path.lstrip("/")
    return posixpath.normpath(posixpath.join(base, path)) if base else posixpath.normpath(path)


def _child_package(parent_pkg: str, group: str | None, pkg: str | None) -> str:
    """Hydra 1.1+ package rules, enough to locate the keys a user's file sets."""
    if pkg is not None:
        if pkg.startswith("_global_"):
            return pkg[len("_global_") :].lstrip(".")
        pkg = pkg.replace("_group_", (group or "").replace("/", "."))
        return f"{parent_pkg}.{pkg}" if parent_pkg else pkg
    if group is None:
        return parent_pkg
    last = group.replace("/", ".")
    return f"{parent_pkg}.{last}" if parent_pkg else last


def _header_package(path: str) -> str | None:
    with open(path, encoding="utf-8") as f:
        for line in f:
            stripped = line.strip()
            if stripped.startswith("# @package"):
                return stripped[len("# @package") :].strip()
            if stripped and not stripped.startswith("#"):
                return None
    return None


def _dotted(node: Any, prefix: str) -> list[str]:
    if isinstance(node, dict) and node:
        return [k for key, v in node.items() for k in _dotted(v, f"{prefix}.{key}" if prefix else str(key))]
    return [prefix] if prefix else []


class _Walker:
    def __init__(self, sources: ConfigSources) -> None:
        self.sources = sources
        self.user_keys: set[str] = set()
        self.seen: set[str] = set()
        self.replaced: set[str] = set()  # group[@package] keys whose choice the command line replaces

    def content_keys(self, node: DictConfig, package: str) -> None:
        body = {k: v for k, v in OmegaConf.to_container(node, resolve=False).items() if k not in ("defaults", "hydra")}
        self.user_keys.update(_dotted(body, package))

    def walk(self, node: DictConfig, where: str, group_dir: str, package: str) -> None:
        defaults = node.get("defaults") if isinstance(node, DictConfig) else None
        if defaults is None:
            return
        if not OmegaConf.is_list(defaults):
            raise ConfigError(f"{where}: defaults must be a list")
        for item in OmegaConf.to_container(defaults, resolve=False):
            try:
                entry = _parse_entry(item)
            except ConfigError as e:
                raise ConfigError(f"{where}: {e.problems[0]}") from None
            if entry is not None:
                self.check(entry, where, f"defaults entry {entry.text!r}", group_dir, package)

    def check(self, entry: _Entry, where: str, what: str, group_dir: str, package: str) -> None:
        if entry.group is None:
            if not isinstance(entry.name, str) or "${" in entry.name:
                return
            path = _join(group_dir, entry.name)
            if not self.sources.exists(path):
                if entry.optional:
                    return
                known = ", ".join(sorted(self.sources.packaged_names))
                dirs = " or ".join(self.sources.user_dirs) or "no directory (give --config-path)"
                raise ConfigError(
                    f"{where}: {what}: no config {entry.name!r} ({path}.yaml not in {dirs}; packaged configs: {known})"
                )
            self.descend(path, where, _child_package(package, None, entry.package))
            return
        group = _join(group_dir, entry.group)
        if group == "hydra" or group.startswith("hydra/"):
            return  # Hydra's own groups (hydra/job_logging, ...): Hydra checks them
        if where != "command line" and _choice_key(group, entry.package) in self.replaced:
            return  # the command line picks another option: this one is never loaded
        names = entry.name if isinstance(entry.name, list) else [entry.name]
        options = self.sources.options(group)
        for name in names:
            if name is None or name == "???" or not isinstance(name, str) or "${" in name:
                continue
            if name in options:
                self.descend(f"{group}/{name}", where, _child_package(package, group, entry.package))
                continue
            if entry.optional:
                continue
            note = _UNAVAILABLE.get(name) or _UNAVAILABLE.get(group.rpartition("/")[2])
            if not options:
                groups = ", ".join(self.sources.groups())
                msg = f"no config group {group!r} (available groups: {groups})"
            else:
                msg = f"no option {name!r} in group {group!r} (available: {', '.join(options)})"
            raise ConfigError(f"{where}: {what}: {msg}" + (f"; {note}" if note else ""))

    def descend(self, path: str, where: str, package: str) -> None:
        """Recurse into a user file (packaged configs are ours and need no check)."""
        file = self.sources.find_file(path)
        if file is None or file in self.seen:
            return
        self.seen.add(file)
        try:
            node = OmegaConf.load(file)
        except Exception as e:  # yaml.YAMLError or OmegaConf errors; the message carries line and column
            raise ConfigError(f"config file {file}: invalid YAML: {' '.join(str(e).split())}") from e
        if not isinstance(node, DictConfig):
            return
        header = _header_package(file)
        if header is not None:
            group = posixpath.dirname(path)
            package = _child_package("", group, header) if header != "_global_" else ""
        self.content_keys(node, package)
        self.walk(node, f"config file {file}", posixpath.dirname(path), package)


def _choice_key(group: str, package: str | None) -> str:
    return f"{group}@{package}" if package else group


def parse_group_override(text: str) -> _Entry | None:
    """A command-line config-group choice (``actor@actor_rollout_ref.actor=my_actor``, ``+experiment=x``,
    ``~group``) as a defaults entry; None for a deletion (nothing to look up)."""
    body = text.lstrip("+")
    if body.startswith("~"):
        return None
    key, _, value = body.partition("=")
    group, _, pkg = key.partition("@")
    names = [v.strip() for v in value.split(",")] if value else [None]
    return _Entry(text, group, names, pkg or None, False, not text.startswith("+"))


def check_defaults_list(
    primary: DictConfig | None, primary_file: str | None, sources: ConfigSources, group_overrides: list[str]
) -> set[str]:
    """Check the primary YAML's defaults list (and the user files it reaches) and the command line's group choices.

    Returns:
        The dotted keys set by the user's files, each under the package it is merged at.

    Raises:
        ConfigError: one line naming the file (or override), the entry, and what exists.
    """
    walker = _Walker(sources)
    cli = [parse_group_override(t) for t in group_overrides if not t.lstrip("+~").startswith("hydra")]
    walker.replaced = {_choice_key(e.group, e.package) for e in cli if e is not None and e.group and e.override}
    if primary is not None and primary_file is not None:
        walker.content_keys(primary, "")
        walker.walk(primary, f"config file {primary_file}", "", "")
    for text in group_overrides:
        if text.lstrip("+~").startswith("hydra.") or text.lstrip("+~").startswith("hydra/"):
            continue
        entry = parse_group_override(text)
        if entry is not None:
            walker.check(entry, "command line", f"override {text!r}", "", "")
    return walker.user_keys
