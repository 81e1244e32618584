"""Build a trainer config: Hydra composition (packaged defaults, the user's YAML and its ``defaults:`` list, config
groups, ``hydra.*`` keys; see :mod:`verl.trainer.config.compose`) <- ``key=value`` overrides, then validate.

Override grammar (verl/Hydra-style, one string each):

* ``a.b.c=value``  set an existing key; ``value`` is parsed as YAML (``16``, ``1e-5``, ``true``, ``null``,
  ``[a,b]``, ``{k: v}``, ``'quoted string'``, ``${other.key}``); an empty value is the empty string.
* ``+a.b.new=value``  add a key that is not in the defaults (an error if it exists); such keys are exempt from the
  unknown-key check.
* ``++a.b.key=value``  set the key, adding it when missing.
* ``~a.b.key``  delete a key.

A schema may declare ``key_aliases`` (``{"critic.model.fsdp_config": "critic.fsdp_config"}``): a key under an alias
(in an override or a user YAML) is moved to its canonical place before anything is applied, so verl scripts that use
another spelling of a section set the same key.

The same loader serves every entry point: SFT, DPO and KTO pass their own ``config_name`` and ``schema``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config.schema import PPOConfig
from verl.trainer.config.validation import ConfigError, validate_config

CONFIG_PACKAGE = "verl.trainer.config"

# Top-level keys of a Hydra-style user YAML that belong to Hydra, not to the trainer: verl's example YAMLs start
# with `defaults: [ppo_trainer, _self_]`, which is exactly what this loader always does.
_HYDRA_ONLY_KEYS = ("defaults", "hydra")

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
    """``key`` with a leading alias path replaced by its canonical path (unchanged when no alias matches)."""
    for alias, canonical in aliases.items():
        if key == alias or key.startswith(alias + "."):
            return canonical + key[len(alias) :]
    return key


def _alias_overrides(overrides: list[str] | list[Override], aliases: dict[str, str]) -> list[Override]:
    parsed = [item if isinstance(item, Override) else parse_override(item) for item in overrides]
    if not aliases:
        return parsed
    return [Override(ov.op, rename_aliased_key(ov.key, aliases), ov.value, ov.text) for ov in parsed]


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


def demo_overlay_applies(schema: type | None, config_file: str | None, overrides: list[str] | None) -> bool:
    """Whether the schema's embedded-demo layer (``demo.yaml`` for ``main_ppo``) goes under the user's layers,
    judged from one user YAML and the overrides (:func:`build_config` also looks into the files its defaults list
    pulls in, and reports its decision as ``BuiltConfig.demo_applied``).

    It does when the schema names one and neither the user YAML nor an override sets ``data.train_files``: a bare
    ``main_ppo`` (and ``make demo``) trains the quick bundled demo, while a user's script, which always names its
    data, gets upstream verl's defaults for every key it leaves out.
    """
    if not getattr(schema, "demo_config_name", None):
        return False
    key = "data.train_files"
    for text in overrides or []:
        try:
            ov = text if isinstance(text, Override) else parse_override(text)
        except ConfigError:
            continue  # reported when the overrides are applied
        if ov.op != "delete" and ov.key == key:
            return False
    if config_file is not None and os.path.isfile(config_file):
        try:
            user = OmegaConf.load(config_file)
        except Exception:  # noqa: BLE001 - load_user_yaml reports it with the file name
            return False
        if isinstance(user, DictConfig) and OmegaConf.select(user, key, default=None) is not None:
            return False
    return True


def packaged_config_names(package: str = CONFIG_PACKAGE) -> list[str]:
    """The names of the YAML files shipped in ``package`` (``ppo_trainer``, ...)."""
    root = resources.files(package)
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def packaged_config_text(config_name: str, package: str = CONFIG_PACKAGE) -> str:
    """The text of the packaged ``<config_name>.yaml`` (read through importlib.resources, so it works installed)."""
    name = config_name[: -len(".yaml")] if config_name.endswith(".yaml") else config_name
    res = resources.files(package).joinpath(f"{name}.yaml")
    if not res.is_file():
        known = ", ".join(packaged_config_names(package)) or "none"
        raise ConfigError(f"no packaged config {name!r} in {package} (available: {known})")
    return res.read_text(encoding="utf-8")


def load_user_yaml(path: str) -> DictConfig:
    """Load a user YAML file as a mapping, dropping Hydra's own top-level keys (``defaults``, ``hydra``).

    A plain reader for tools that want one file's own keys; :func:`build_config` composes the defaults list instead.
    """
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path}: not found")
    try:
        user = OmegaConf.load(path)
    except Exception as e:  # yaml.YAMLError or OmegaConf errors; the message carries line and column
        raise ConfigError(f"config file {path}: invalid YAML: {' '.join(str(e).split())}") from e
    if not isinstance(user, DictConfig):
        raise ConfigError(f"config file {path}: the top level must be a mapping of sections, got a list")
    for key in _HYDRA_ONLY_KEYS:
        if key in user:
            del user[key]
    return user


@dataclass
class BuiltConfig:
    """What :func:`build_config` made: the resolved, validated job config; Hydra's own node (``hydra.*``: run
    directory, job name, logging ...); whether the embedded demo layer applied; the keys the user set."""

    cfg: DictConfig
    hydra: DictConfig
    demo_applied: bool
    user_keys: set[str]


def load_config(
    overrides: list[str] | None = None,
    config_name: str = "ppo_trainer",
    config_file: str | None = None,
    schema: type | None = PPOConfig,
    package: str = CONFIG_PACKAGE,
    config_dir: str | None = None,
) -> DictConfig:
    """Build, resolve and validate a trainer config (see :func:`build_config`); returns only the job config.

    Returns:
        The resolved ``DictConfig`` (not in struct mode: the trainer may fill in runtime keys).

    Raises:
        ConfigError: every problem found, one per line (bad override, unknown key, wrong type, bad arithmetic...).
    """
    return build_config(overrides, config_name, config_file, schema, package, config_dir).cfg


def build_config(
    overrides: list[str] | None = None,
    config_name: str = "ppo_trainer",
    config_file: str | None = None,
    schema: type | None = PPOConfig,
    package: str = CONFIG_PACKAGE,
    config_dir: str | None = None,
    job_name: str = "app",
) -> BuiltConfig:
    """Build, resolve and validate a trainer config, Hydra's way with this project's layers on top.

    Layers, later wins:

    1. Hydra composition (:mod:`verl.trainer.config.compose`): the packaged ``<config_name>`` (with the embedded
       demo layered on it when the schema names one and nothing sets ``data.train_files``), or the user's
       ``config_file`` with its ``defaults:`` list (a file without one starts from ``<config_name>``); config-group
       choices and ``hydra.*`` overrides are applied by Hydra here. ``config_dir`` puts a directory of the user's
       configs on the search path without a primary file of its own.
    2. Key aliases of the schema (``critic.model.fsdp_config`` -> ``critic.fsdp_config``).
    3. ``overrides`` (see the module docstring for the grammar; a sweep value such as ``key=a,b`` is an error here:
       the entry point expands ``-m`` sweeps into one call per job).
    4. ``${...}`` interpolations, resolved after all layers, so ``data.max_response_length=32`` also moves
       ``rollout.response_length``; then the schema's ``adapt_defaults`` and validation against the dataclass
       ``schema`` (skipped when ``schema`` is None); its warnings are emitted as :class:`ConfigWarning`.

    Raises:
        ConfigError: every problem found, one per line.
    """
    from verl.trainer.config.compose import _packaged_container, compose, packaged_sources, reorder_like
    from verl.trainer.config.hydra_keys import check_hydra_keys, is_group_override, is_hydra_override
    from verl.trainer.config.sweep import reject_sweeps

    template = _packaged_container(config_name, package, None)  # also: a clear error for an unknown name
    tokens = [item.text if isinstance(item, Override) else item for item in (overrides or [])]
    reject_sweeps(tokens)
    groups = set(packaged_sources(package).packaged_groups)
    for d in [os.path.dirname(os.path.abspath(config_file)) if config_file else None, config_dir]:
        if d and os.path.isdir(d):
            groups.update(f for f in os.listdir(d) if os.path.isdir(os.path.join(d, f)))
    hydra_side = [t for t in tokens if is_hydra_override(t) or is_group_override(t, groups)]
    ours = [t for t in tokens if t not in hydra_side]
    yaml_hydra = peek_hydra_section(config_file)
    check_hydra_keys(hydra_side, yaml_hydra, config_file)
    aliases = dict(getattr(schema, "key_aliases", None) or {})
    try:
        parsed: list[Any] = _alias_overrides(ours, aliases)
    except ConfigError:
        parsed = list(ours)  # apply_overrides reports every malformed override at once
    demo_name = getattr(schema, "demo_config_name", None)
    sets_data = any(isinstance(ov, Override) and ov.op != "delete" and ov.key == "data.train_files" for ov in parsed)
    composed = compose(
        config_name,
        config_file,
        hydra_side,
        package=package,
        demo_name=demo_name,
        demo_off=sets_data,
        config_dir=config_dir,
        job_name=job_name,
    )
    cfg = OmegaConf.create(reorder_like(OmegaConf.to_container(composed.cfg, resolve=False), template))
    if config_file is not None:
        missing = [k for k in template if k not in cfg]
        if missing:
            raise ConfigError(
                f"config file {config_file}: the composed config has no {', '.join(missing)}: does its defaults "
                f"list name the packaged base ({config_name}) before _self_?"
            )
    cfg = _alias_user_yaml(cfg, aliases)
    user_keys = {rename_aliased_key(k, aliases) for k in composed.user_keys}
    user_keys.update(ov.key for ov in parsed if isinstance(ov, Override))
    added = apply_overrides(cfg, parsed)
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot resolve interpolation: {' '.join(str(e).split())}") from e
    adapt = getattr(schema, "adapt_defaults", None)
    if callable(adapt):
        adapt(cfg, user_keys)
    if schema is not None:
        validate_config(cfg, schema, extra_keys=added)
    return BuiltConfig(cfg, composed.hydra, composed.demo_applied, user_keys)


def peek_hydra_section(config_file: str | None) -> Any:
    """The ``hydra:`` section of a user YAML (None when absent or unreadable: composing reports that)."""
    if config_file is None or not os.path.isfile(config_file):
        return None
    try:
        node = OmegaConf.load(config_file)
    except Exception:  # noqa: BLE001 - reported with the file name when the file is composed
        return None
    return node.get("hydra") if isinstance(node, DictConfig) else None


def _dotted_keys(node: Any, prefix: str = "") -> list[str]:
    """Every leaf of a (plain) mapping as a dotted key: ``{"a": {"b": 1}}`` -> ``["a.b"]``."""
    if not isinstance(node, dict):
        return [prefix[:-1]] if prefix else []
    return [key for k, v in node.items() for key in _dotted_keys(v, f"{prefix}{k}.")]


def config_to_yaml(cfg: DictConfig) -> str:
    """The config as YAML text, interpolations resolved (what ``--cfg job`` prints)."""
    return OmegaConf.to_yaml(cfg, resolve=True)
