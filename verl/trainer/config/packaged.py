"""The YAML configs shipped in the package (``ppo_trainer``, ``sft_trainer``, ``demo``, ...), read through
importlib.resources so they are found in an installed wheel as in a checkout."""

from __future__ import annotations

from importlib import resources

from verl.trainer.config.validation import ConfigError

CONFIG_PACKAGE = "verl.trainer.config"


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
