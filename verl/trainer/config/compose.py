"""Compose a config from defaults lists with Hydra, the way verl's ``@hydra.main`` entry points do.

What a verl user's YAML may say, and what it means here (Hydra 1.3 semantics, ``hydra.compose`` underneath):

* ``defaults: [ppo_trainer, _self_]``: the packaged ``ppo_trainer`` (or ``sft_trainer``, ``dpo_trainer``,
  ``kto_trainer``, ``fsdp_sft_trainer``, ``eval``, ``demo``), then the file itself. ``_self_`` first makes the
  listed configs win over the file, as in Hydra. A YAML with no ``defaults`` key gets ``[<entry point's config>,
  _self_]``: it only needs the keys it changes (what ``--config FILE`` always meant here).
* The user's own files next to it (the YAML's directory, or ``--config-path``): ``- my_base`` loads
  ``my_base.yaml``, whose own defaults list is composed too; ``- optional foo: bar`` skips a missing file.
* Config groups of verl's layout, cut out of the packaged ``ppo_trainer.yaml`` (one source, nothing written twice):
  ``data@data: legacy_data``, ``actor@actor_rollout_ref.actor: dp_actor``, ``ref@actor_rollout_ref.ref: dp_ref``,
  ``rollout@actor_rollout_ref.rollout: rollout``, ``model@actor_rollout_ref.model: hf_model``,
  ``critic@critic: dp_critic``, ``reward_model@reward_model: dp_reward_model``. The packaged ``ppo_trainer`` is
  stored as those entries plus ``_self_`` (the rest), so ``override actor@actor_rollout_ref.actor: my_actor`` in a
  defaults list, or ``actor@actor_rollout_ref.actor=my_actor`` on the command line, swaps in the user's
  ``actor/my_actor.yaml`` (which may itself start from ``- dp_actor``).
* ``hydra.searchpath`` entries that point at verl's own config directory (upstream recipes write
  ``file://verl/trainer/config``) are dropped: the packaged configs are always on the search path.

The packaged configs live in Hydra's ConfigStore (rather than a ``pkg://`` search path entry) because the groups are
slices of one file, and because the embedded demo (``demo.yaml``) must sit between the packaged base and the user's
files when it applies.
"""

from __future__ import annotations

import copy
import os
import re
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.defaults_check import ConfigSources, check_defaults_list
from verl.trainer.config.packaged import packaged_config_names, packaged_config_text
from verl.trainer.config.validation import ConfigError

PRIMARY_NAME = "__verl_primary__"
DEMO_OFF_KEY = "data.train_files"  # the embedded demo applies unless the user's files or overrides name the data

# Config groups cut out of a packaged config: (group, option, package). Names follow upstream verl's config layout.
GROUP_SLICES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "ppo_trainer": (
        ("data", "legacy_data", "data"),
        ("actor", "dp_actor", "actor_rollout_ref.actor"),
        ("ref", "dp_ref", "actor_rollout_ref.ref"),
        ("rollout", "rollout", "actor_rollout_ref.rollout"),
        ("model", "hf_model", "actor_rollout_ref.model"),
        ("critic", "dp_critic", "critic"),
        ("reward_model", "dp_reward_model", "reward_model"),
    ),
}

_VERL_CONFIG_DIR_RE = re.compile(r"^(file://)?(.*/)?verl/trainer/config/?$|^pkg://verl\.trainer\.config$")


@dataclass
class Composed:
    """The result of :func:`compose`: the job config (a plain container, the caller's to change), Hydra's own node,
    and what came from the user's files (dotted keys, for the adapt-defaults step)."""

    job: dict[str, Any]
    hydra: DictConfig
    user_keys: set[str] = field(default_factory=set)
    primary_file: str | None = None
    demo_applied: bool = False


@lru_cache(maxsize=32)
def _packaged_container(name: str, package: str, demo_name: str | None) -> dict[str, Any]:
    """A packaged YAML as a plain dict (``demo_name`` merged over it when given); parsed once per process."""
    node = OmegaConf.create(packaged_config_text(name, package))
    if not isinstance(node, DictConfig):
        raise ConfigError(f"packaged config {name!r}: the top level must be a mapping")
    if demo_name:
        node = OmegaConf.merge(node, OmegaConf.create(packaged_config_text(demo_name, package)))
    return OmegaConf.to_container(node, resolve=False)


_REGISTERED: list[tuple[str, str | None, str | None]] = []

# compose() of the packaged configs alone, as plain (job, hydra) containers, keyed by everything that decides them
_PACKAGED_COMPOSITIONS: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, Any]]] = {}
_PACKAGED_COMPOSITIONS_MAX = 64


def register_packaged_configs(package: str, demo_for: str | None = None, demo_name: str | None = None) -> None:
    """Store every packaged YAML of ``package`` in Hydra's ConfigStore, ``ppo_trainer`` cut into its groups.

    ``demo_for`` names the config that gets ``demo_name`` merged over it first (the embedded demo's layer), so a
    user's ``defaults: [ppo_trainer, _self_]`` composes over the demo exactly when a bare run would. The store is
    only rewritten when the variant changes.
    """
    from hydra.core.config_store import ConfigStore

    variant = (package, demo_for, demo_name)
    if _REGISTERED and _REGISTERED[-1] == variant:
        return
    cs = ConfigStore.instance()
    for name in packaged_config_names(package):
        node = copy.deepcopy(_packaged_container(name, package, demo_name if name == demo_for else None))
        entries: list[Any] = []
        for group, option, pkg in GROUP_SLICES.get(name, ()):
            *parents, leaf = pkg.split(".")
            parent = node
            for part in parents:
                parent = parent.get(part) if isinstance(parent, dict) else None
            if not isinstance(parent, dict) or not isinstance(parent.get(leaf), dict):
                continue
            cs.store(group=group, name=option, node=parent.pop(leaf))
            entries.append({f"{group}@{pkg}": option})
        if entries:
            node = {"defaults": [*entries, "_self_"], **node}
        cs.store(name=name, node=node)
    _REGISTERED.append(variant)


def packaged_sources(package: str) -> ConfigSources:
    """The packaged names and groups (with their options), for the defaults-list check."""
    groups: dict[str, set[str]] = {}
    for slices in GROUP_SLICES.values():
        for group, option, _ in slices:
            groups.setdefault(group, set()).add(option)
    return ConfigSources(packaged_names=set(packaged_config_names(package)), packaged_groups=groups)


def read_yaml_mapping(path: str) -> DictConfig:
    """A user YAML file whose top level is a mapping; a missing file, bad YAML (with its line and column) or a list
    at the top is a one-line :class:`ConfigError` naming the file."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path}: not found")
    try:
        node = OmegaConf.load(path)
    except Exception as e:  # yaml.YAMLError or OmegaConf errors; the message carries line and column
        raise ConfigError(f"config file {path}: invalid YAML: {' '.join(str(e).split())}") from e
    if not isinstance(node, DictConfig):
        raise ConfigError(f"config file {path}: the top level must be a mapping of sections, got a list")
    return node


def load_primary(path: str, default_base: str) -> DictConfig:
    """Read a user YAML as the primary config: a mapping; ``defaults: [default_base, _self_]`` when it has none."""
    node = read_yaml_mapping(path)
    if "defaults" not in node:
        node = OmegaConf.create({"defaults": [default_base, "_self_"], **OmegaConf.to_container(node)})
    elif not OmegaConf.is_list(node.defaults):
        raise ConfigError(f"config file {path}: defaults must be a list (e.g. defaults: [ppo_trainer, _self_])")
    searchpath = OmegaConf.select(node, "hydra.searchpath", default=None)
    if searchpath is not None:
        kept = [p for p in searchpath if not _VERL_CONFIG_DIR_RE.match(str(p))]
        node.hydra.searchpath = kept
    return node


def _user_dirs(primary_dir: str | None, primary: DictConfig | None) -> list[str]:
    dirs = [primary_dir] if primary_dir else []
    for entry in OmegaConf.select(primary, "hydra.searchpath", default=None) or []:
        text = str(entry)
        if text.startswith("file://"):
            dirs.append(os.path.abspath(text[len("file://") :]))
    return dirs


def compose(
    config_name: str,
    config_file: str | None,
    hydra_overrides: list[str],
    *,
    package: str,
    demo_name: str | None = None,
    demo_off: bool = False,
    config_dir: str | None = None,
    job_name: str = "app",
) -> Composed:
    """Compose the job config with Hydra: the packaged ``config_name`` or the user's ``config_file`` (whose defaults
    list decides), with ``hydra_overrides`` (``hydra.*`` keys and config-group choices) applied by Hydra itself.

    Raises:
        ConfigError: one line naming the YAML file and the defaults entry (missing file, unknown group or option),
            or Hydra's own complaint, first line only.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    sources = packaged_sources(package)
    primary_file = None
    # Hydra's initialize* registers itself globally when constructed, so the context is made only when composing
    if config_file is not None:
        primary_file = os.path.abspath(config_file)
        primary = load_primary(primary_file, config_name)
        sources.user_dirs = _user_dirs(os.path.dirname(primary_file), primary)
        user_keys = check_defaults_list(primary, primary_file, sources, hydra_overrides)
        ConfigStore.instance().store(name=PRIMARY_NAME, node=primary)
        search_dir: str | None = os.path.dirname(primary_file)
        name = PRIMARY_NAME
    else:
        sources.user_dirs = [os.path.abspath(config_dir)] if config_dir else []
        user_keys = check_defaults_list(None, None, sources, hydra_overrides)
        search_dir = os.path.abspath(config_dir) if config_dir else None
        name = config_name
    demo = bool(demo_name) and not demo_off and DEMO_OFF_KEY not in user_keys
    register_packaged_configs(package, demo_for=config_name if demo else None, demo_name=demo_name if demo else None)
    where = f"config file {config_file}" if config_file else f"config {config_name!r}"
    # With no user file or directory only the packaged configs take part, so the same request composes the same
    # config: it is composed once per process (Hydra's composition is most of a config's load time).
    memo_key = None
    if search_dir is None:
        memo_key = (name, tuple(hydra_overrides), package, demo_name if demo else None, job_name, os.getcwd())
        plain = _PACKAGED_COMPOSITIONS.get(memo_key)
        if plain is not None:
            job_plain, hydra_plain_dict = copy.deepcopy(plain)
            return Composed(job_plain, OmegaConf.create(hydra_plain_dict), user_keys, None, demo)
    if search_dir is None:
        context: Any = initialize(config_path=None, version_base="1.3", job_name=job_name)
    else:
        context = initialize_config_dir(config_dir=search_dir, version_base="1.3", job_name=job_name)
    try:
        with warnings.catch_warnings(), context:
            warnings.filterwarnings("ignore", message=r".*is not available\.", category=UserWarning)
            # a user's copy of upstream's config directory holds group files named like our ConfigStore entries
            # (actor/dp_actor, ...): Hydra validates them against ours and warns; the schema check is ours anyway
            warnings.filterwarnings(
                "ignore", message=r"(?s).*validated against ConfigStore schema", category=UserWarning
            )
            full = hydra_compose(config_name=name, overrides=list(hydra_overrides), return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise ConfigError(f"{where}: {hydra_message(e, config_file)}") from e
    job_plain = OmegaConf.to_container(full, resolve=False)
    del job_plain["hydra"]
    hydra_plain_dict = OmegaConf.to_container(full.hydra, resolve=False, enum_to_str=True)
    if memo_key is not None:
        if len(_PACKAGED_COMPOSITIONS) >= _PACKAGED_COMPOSITIONS_MAX:
            _PACKAGED_COMPOSITIONS.pop(next(iter(_PACKAGED_COMPOSITIONS)))
        _PACKAGED_COMPOSITIONS[memo_key] = copy.deepcopy((job_plain, hydra_plain_dict))
    return Composed(job_plain, OmegaConf.create(hydra_plain_dict), user_keys, primary_file, demo)


def hydra_message(e: BaseException, config_file: str | None) -> str:
    """Hydra's complaint on one line: the search-path listing dropped, our primary's internal name replaced."""
    text = str(e).split("\nConfig search path:")[0]
    text = text.replace(f"'{PRIMARY_NAME}'", repr(os.path.basename(config_file or PRIMARY_NAME)))
    text = text.replace(PRIMARY_NAME, os.path.basename(config_file or PRIMARY_NAME))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return "; ".join(lines) if lines else type(e).__name__


def reorder_like(node: Any, template: Any) -> Any:
    """A plain copy of ``node`` whose mapping keys follow ``template``'s order (others after, in their order), so a
    composed config prints in the packaged file's order whatever order its defaults list merged it in."""
    if isinstance(node, dict):
        order = list(template) if isinstance(template, dict) else []
        keys = [k for k in order if k in node] + [k for k in node if k not in order]
        return {k: reorder_like(node[k], template.get(k) if isinstance(template, dict) else None) for k in keys}
    return node
