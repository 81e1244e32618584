"""``+key=value`` on a key upstream verl's config lacks and this project's has: a plain set.

Hydra's ``+`` adds a key and fails when the key exists, and this project's override grammar keeps that rule
(:mod:`verl.trainer.config.overrides`). But this project's PPO defaults hold keys upstream v0.9's do not
(``async_training.*``, the asynchronous trainers' section, among them), and scripts written for upstream must add
those with ``+`` (verl-recipe's ``partial_rollout`` passes ``+async_training.partial_rollout=True``). Such an
override is applied as a set: the key is where the script means it to be, and validated like any other. The same
holds for a key v0.9 has and January 2026's verl lacked: scripts written for that verl (verl-recipe's spo pins one)
add it with ``+`` (``+data.gen_batch_size``), and Hydra under v0.9 would refuse them. A ``+`` on a key both
upstream configs have is still an error, as in Hydra.

Upstream's keys: ``upstream_data/v09_ppo_trainer_keys.yaml`` and ``upstream_data/jan2026_ppo_trainer_keys.yaml``
(every dotted path of each generated ``ppo_trainer.yaml``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.overrides import Override

__all__ = ["plus_as_set", "upstream_ppo_keys"]

_DATA = os.path.join(os.path.dirname(__file__), "upstream_data")
_KEYS_FILES = ("v09_ppo_trainer_keys.yaml", "jan2026_ppo_trainer_keys.yaml")


@functools.lru_cache(maxsize=1)
def upstream_ppo_keys() -> frozenset[str]:
    """Every dotted key (sections included) that both upstream generated PPO trainer configs hold (v0.9's and
    January 2026's): the keys a ``+`` was an error for under either."""
    keys = []
    for name in _KEYS_FILES:
        with open(os.path.join(_DATA, name), encoding="utf-8") as f:
            keys.append(frozenset(line[2:].strip() for line in f if line.startswith("- ")))
    return keys[0] & keys[1]


def plus_as_set(cfg: DictConfig, overrides: list[Any], upstream: frozenset[str]) -> list[Any]:
    """``overrides`` with each ``+key=value`` whose key ``cfg`` already holds and ``upstream`` (upstream's config's
    dotted keys, e.g. :func:`upstream_ppo_keys`) lacks turned into ``key=value`` (module docstring); everything else
    unchanged."""
    out: list[Any] = []
    for ov in overrides:
        if isinstance(ov, Override) and ov.op == "add" and ov.key not in upstream and _holds(cfg, ov.key):
            ov = Override("set", ov.key, ov.value, ov.text)
        out.append(ov)
    return out


def _holds(cfg: DictConfig, key: str) -> bool:
    """Whether ``cfg`` has the dotted ``key`` (whatever its value, null included)."""
    node: Any = cfg
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node[part]
    return isinstance(node, DictConfig) and parts[-1] in node
