"""Load interactions from an interaction-config YAML file in verl's format
(``rollout.multi_turn.interaction_config_path``)::

    interaction:
      - name: gsm8k                 # optional: default is the class name without "Interaction", lower-cased
        class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction
        config: {}

A sample picks its interaction with ``extra_info.interaction_kwargs.name``.
"""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from verl.interactions.base import BaseInteraction
from verl.tools.utils.tool_registry import load_class

__all__ = ["initialize_interactions_from_config"]


def initialize_interactions_from_config(interaction_config_file: str) -> dict[str, BaseInteraction]:
    """``{name: interaction}`` of every entry; names must be unique. Errors name the file, entry and key."""
    if not os.path.isfile(interaction_config_file):
        raise FileNotFoundError(
            f"interaction config {interaction_config_file!r} (rollout.multi_turn.interaction_config_path) not found"
        )
    raw = OmegaConf.to_container(OmegaConf.load(interaction_config_file), resolve=True)
    if not isinstance(raw, dict) or not isinstance(raw.get("interaction"), list):
        raise ValueError(f"{interaction_config_file}: expected a top-level 'interaction:' list of entries")
    interactions: dict[str, BaseInteraction] = {}
    for i, entry in enumerate(raw["interaction"]):
        where = f"{interaction_config_file}: interaction[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(f"{where}: each entry needs class_name (and name, config); got {entry!r}")
        cls = load_class(entry["class_name"], where)
        if not issubclass(cls, BaseInteraction):
            raise ValueError(f"{where}: {entry['class_name']} is not a subclass of BaseInteraction")
        name = entry.get("name") or cls.__name__.replace("Interaction", "").lower()
        if name in interactions:
            raise ValueError(f"{where}: an interaction named {name!r} is already defined in this file")
        config = entry.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"{where}.config must be a mapping, got {config!r}")
        try:
            interactions[name] = cls({**config, "name": name})
        except (TypeError, ValueError, OSError) as e:
            raise ValueError(f"{where} ({entry['class_name']}): {e}") from e
    return interactions
