"""Config rules of SPO (``algorithm.spo``, ``algorithm.adv_estimator=spo``; verl/algorithms/spo.py).

:func:`resolve_spo` runs with the other default fitting, before validation: ``algorithm.spo.enable`` (the recipe's
``trainer.spo.enable``) and ``adv_estimator=spo`` are one switch, so either turns both on; the recipe's scripts
say ``adv_estimator=grpo`` with ``trainer.spo.enable=True`` (its trainer replaces GRPO's advantages), which becomes
``spo`` with a ConfigWarning. SPO keys prompts by their text, so ``data.return_raw_chat`` is turned on unless the
user turned it off. :func:`check_spo` refuses what SPO cannot run with, one line each.
"""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import DictConfig

from verl.utils.errors import ConfigWarning

__all__ = ["check_spo", "resolve_spo", "spo_enabled"]

# the estimator the recipe's scripts name beside trainer.spo.enable=True (its trainer overwrites the advantages)
_RECIPE_ESTIMATOR = "grpo"


def spo_enabled(cfg: DictConfig) -> bool:
    """Whether ``cfg`` (a PPO config) trains with SPO: ``algorithm.spo.enable`` or ``adv_estimator=spo``."""
    spo = cfg.algorithm.get("spo")
    return bool(spo is not None and spo.get("enable")) or str(cfg.algorithm.adv_estimator) == "spo"


def resolve_spo(cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
    """Make the two SPO switches agree and keep the prompts' text (module docstring). Returns what changed."""
    if not spo_enabled(cfg):
        return {}
    changed: dict[str, Any] = {}
    algorithm = cfg.algorithm
    estimator = str(algorithm.adv_estimator)
    if estimator == _RECIPE_ESTIMATOR:
        algorithm.adv_estimator = "spo"
        changed["algorithm.adv_estimator"] = "spo"
        warnings.warn(
            "algorithm.spo.enable=true with algorithm.adv_estimator=grpo: the advantages are SPO's (reward minus the "
            "prompt's tracked value, normalised over the batch), as verl-recipe spo's trainer computes them whatever "
            "the estimator says, so algorithm.adv_estimator is spo",
            ConfigWarning,
            stacklevel=2,
        )
    if not algorithm.spo.enable:
        algorithm.spo.enable = True
        changed["algorithm.spo.enable"] = True
    if not cfg.data.return_raw_chat and "data.return_raw_chat" not in user_keys:
        cfg.data.return_raw_chat = True  # the tracker's key is the prompt's text
        changed["data.return_raw_chat"] = True
    if algorithm.spo.offline_values == "":  # the recipe's script passes its unset $OFFLINE_VALUES
        algorithm.spo.offline_values = None
        changed["algorithm.spo.offline_values"] = None
    return changed


def check_spo(cfg: DictConfig, errors: list[str], warns: list[str]) -> None:
    """What SPO cannot run with (one line each) and a generation batch too small to sample from (a warning)."""
    if not spo_enabled(cfg):
        return
    spo = cfg.algorithm.spo
    estimator = str(cfg.algorithm.adv_estimator)
    if estimator != "spo":
        errors.append(
            f"algorithm.adv_estimator={estimator} with algorithm.spo.enable=true: SPO computes its own advantages "
            "(reward minus the prompt's tracked value); use algorithm.adv_estimator=spo (or grpo, as the recipe says)"
        )
    if not cfg.data.return_raw_chat:
        errors.append(
            "data.return_raw_chat=false: SPO keys each prompt's tracked value by its text (raw_prompt); set it true"
        )
    if cfg.algorithm.filter_groups.enable:
        errors.append(
            "algorithm.filter_groups.enable=true with SPO: SPO draws each step's prompts by priority out of the "
            "loader's batch, dynamic sampling draws until groups vary; use one of them"
        )
    at = cfg.get("async_training")
    if at is not None and (at.get("mode") is not None or at.get("partial_rollout")):
        errors.append(
            "algorithm.spo with async_training: the prompt values are tracked by the synchronous driver, which must "
            "see each step's outcomes before drawing the next prompts; drop async_training.mode / partial_rollout"
        )
    if int(spo.offline_N) < 0:
        errors.append(f"algorithm.spo.offline_N={spo.offline_N} must be >= 0 (0: ignore the offline scores)")
    rho = spo.rho
    if str(rho.type) == "constant" and not 0.0 < float(rho.value) <= 1.0:
        errors.append(f"algorithm.spo.rho.value={rho.value} must lie in (0, 1] (the discount of old outcomes)")
    if not 0.0 <= float(rho.clip_lower) < 0.96:
        errors.append(
            f"algorithm.spo.rho.clip_lower={rho.clip_lower} must lie in [0, 0.96) (the discount's floor; 0.96 is its "
            "ceiling, and the offline prior weighs 1 / (1 - clip_lower) outcomes)"
        )
    gen, train = cfg.data.get("gen_batch_size"), int(cfg.data.train_batch_size)
    if gen is None or int(gen) == train:
        warns.append(
            f"algorithm.spo with data.gen_batch_size {'unset' if gen is None else gen}: each step draws all "
            f"{train} prompts of the loader's batch, so the priority sampling changes nothing; set "
            "data.gen_batch_size above data.train_batch_size (the recipe: 14000 for 1024) to draw by priority"
        )
