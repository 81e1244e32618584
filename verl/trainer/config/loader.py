"""Build a trainer config: Hydra composition (packaged defaults, the user's YAML and its ``defaults:`` list, config
groups, ``hydra.*`` keys; see :mod:`verl.trainer.config.compose`) <- ``key=value`` overrides, then validate.

The override grammar (``key=value``, ``+key``, ``++key``, ``~key``, key aliases) is
:mod:`verl.trainer.config.overrides`.

The same loader serves every entry point: SFT, DPO and KTO pass their own ``config_name`` and ``schema``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config.overrides import (  # noqa: F401  (the override grammar's names, importable from here)
    Override,
    OverrideOp,
    _alias_overrides,
    _alias_user_yaml,
    apply_overrides,
    parse_override,
    parse_value,
    rename_aliased_key,
)
from verl.trainer.config.packaged import (  # noqa: F401  (importable from here, as before)
    CONFIG_PACKAGE,
    packaged_config_names,
    packaged_config_text,
)
from verl.trainer.config.schema import PPOConfig
from verl.trainer.config.validation import ConfigError, validate_config

# Top-level keys of a Hydra-style user YAML that belong to Hydra, not to the trainer: verl's example YAMLs start
# with `defaults: [ppo_trainer, _self_]`, which is exactly what this loader always does.
_HYDRA_ONLY_KEYS = ("defaults", "hydra")


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


def load_user_yaml(path: str) -> DictConfig:
    """Load a user YAML file as a mapping, dropping Hydra's own top-level keys (``defaults``, ``hydra``).

    A plain reader for tools that want one file's own keys; :func:`build_config` composes the defaults list instead.
    """
    from verl.trainer.config.compose import read_yaml_mapping

    user = read_yaml_mapping(path)
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


# the sections that make a user's primary config a whole trainer config rather than a fragment (see build_config)
_WHOLE_TRAINER = ("data", "actor_rollout_ref", "algorithm", "trainer")


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
       configs on the search path without a primary file of its own. A user file composing a whole trainer config
       of its own groups (``data``, ``actor_rollout_ref``, ``algorithm``, ``trainer``; e.g. a copy of upstream's
       config directory) is laid over the packaged base; a fragment without the base is an error.
    2. Key aliases of the schema (``critic.model.fsdp_config`` -> ``critic.fsdp_config``).
    3. ``overrides`` (see the module docstring for the grammar; a sweep value such as ``key=a,b`` is an error here:
       the entry point expands ``-m`` sweeps into one call per job).
    4. ``${...}`` interpolations, resolved after all layers, so ``data.max_response_length=32`` also moves
       ``rollout.response_length``; then the schema's ``adapt_defaults`` and validation against the dataclass
       ``schema`` (skipped when ``schema`` is None); its warnings are emitted as :class:`ConfigWarning`.

    Raises:
        ConfigError: every problem found, one per line.
    """
    from verl.trainer.config.compose import _packaged_container, compose, reorder_like
    from verl.trainer.config.hydra_keys import check_hydra_keys
    from verl.trainer.config.sweep import reject_sweeps
    from verl.trainer.config.upstream_engines import refuse_engines_in_config, refuse_other_engines
    from verl.trainer.config.upstream_plus import plus_as_set

    template = _packaged_container(config_name, package, None)  # also: a clear error for an unknown name
    tokens = [item.text if isinstance(item, Override) else item for item in (overrides or [])]
    reject_sweeps(tokens)
    refuse_other_engines(tokens)  # one line for an engine we lack, before its keys are looked at
    hydra_side, ours = split_overrides(tokens, package, config_file, config_dir)
    check_hydra_keys(hydra_side, peek_hydra_section(config_file), config_file)
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
    cfg = OmegaConf.create(reorder_like(composed.job, template))
    if config_file is not None:
        missing = [k for k in template if k not in cfg]
        if missing and all(k in cfg for k in _WHOLE_TRAINER):
            # a whole trainer config of its own (a copy of upstream's config directory, composed from its own
            # groups): the sections this project adds come from the packaged base, the user's values win
            cfg = OmegaConf.merge(OmegaConf.create(template), cfg)
            missing = []
        if missing:
            raise ConfigError(
                f"config file {config_file}: the composed config has no {', '.join(missing)}: does its defaults "
                f"list name the packaged base ({config_name}) before _self_?"
            )
    cfg = _alias_user_yaml(cfg, aliases)
    user_keys = {rename_aliased_key(k, aliases) for k in composed.user_keys}
    user_keys.update(ov.key for ov in parsed if isinstance(ov, Override))
    upstream_keys = getattr(schema, "upstream_keys", None)
    if callable(upstream_keys):  # `+key` for a key upstream lacks and this project has: a set
        parsed = plus_as_set(cfg, parsed, upstream_keys())
    added = apply_overrides(cfg, parsed)
    drop_upstream_targets(cfg)
    refuse_engines_in_config(cfg)
    _resolve_and_validate(cfg, schema, user_keys, added)
    return BuiltConfig(cfg, composed.hydra, composed.demo_applied, user_keys)


def split_overrides(
    tokens: list[str], package: str, config_file: str | None, config_dir: str | None
) -> tuple[list[str], list[str]]:
    """``(hydra's, ours)``: ``hydra.*`` keys and config-group choices (groups of the package, of the user's config
    file's directory and of ``config_dir``) go into Hydra's composition; the rest are applied after it."""
    from verl.trainer.config.compose import packaged_sources
    from verl.trainer.config.hydra_keys import is_group_override, is_hydra_override

    groups = set(packaged_sources(package).packaged_groups)
    for d in [os.path.dirname(os.path.abspath(config_file)) if config_file else None, config_dir]:
        if d and os.path.isdir(d):
            groups.update(f for f in os.listdir(d) if os.path.isdir(os.path.join(d, f)))
    hydra_side = [t for t in tokens if is_hydra_override(t) or is_group_override(t, groups)]
    return hydra_side, [t for t in tokens if t not in hydra_side]


def _resolve_and_validate(cfg: DictConfig, schema: type | None, user_keys: set[str], added: Any) -> None:
    """Layer 4 of :func:`build_config`, in place: interpolations, the schema's ``adapt_defaults``, validation."""
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot resolve interpolation: {' '.join(str(e).split())}") from e
    adapt = getattr(schema, "adapt_defaults", None)
    if callable(adapt):
        adapt(cfg, user_keys)
    if schema is not None:
        validate_config(cfg, schema, extra_keys=added)


# verl-recipe config classes whose only addition is a key built into this project's schema: their ``_target_`` is
# dropped like upstream's own (class -> the key it adds)
RECIPE_CONFIG_CLASSES = {
    "recipe.gvpo.gvpo_actor_config.FSDPActorConfig": "actor_rollout_ref.actor.gvpo_beta",
    "recipe.sppo.config.SPPOActorConfig": "actor_rollout_ref.actor.sppo_eta",
}


def drop_upstream_targets(cfg: DictConfig, path: str = "") -> None:
    """Remove, in place, every ``_target_`` key naming one of upstream verl's config classes
    (``verl.trainer.config.FilterGroupsConfig``, ...) or a recipe's class in :data:`RECIPE_CONFIG_CLASSES`, as recipe
    YAMLs written for verl v0.9 carry them: each section here is typed by this project's schema, so the class is
    already decided. A ``_target_`` naming anything else (a class of the user's) would not be instantiated: that is
    a :class:`ConfigError` naming the key."""
    for key in list(cfg.keys()):
        child = cfg._get_node(key)
        where = f"{path}{key}"
        if key == "_target_":
            value = child._value() if child is not None else None
            if isinstance(value, str) and (value.startswith("verl.") or value in RECIPE_CONFIG_CLASSES):
                del cfg[key]
                continue
            raise ConfigError(
                f"{where}={value}: sections here are typed by this project's schema and no class is instantiated "
                "from the config; remove it (a class of your own goes through the documented extension keys)"
            )
        if isinstance(child, DictConfig):
            drop_upstream_targets(child, f"{where}.")


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
