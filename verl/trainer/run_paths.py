"""The paths a run reads, resolved on the driver before any worker starts: every model path of the config (hub
ids downloaded once into the Hugging Face cache, bundled names converted; :mod:`verl.models.hub`,
:func:`verl.models.loader.resolve_model_path`) and a check that the data keys name files, not hub data set ids.
Workers then resolve the same ids to the same cached snapshots without touching the network.

Errors are one line prefixed with the config key (:class:`~verl.models.hub.ModelPathError`,
:class:`~verl.models.hub.DatasetPathError`): entry points exit with code 2 and no traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from verl.base_config import get_config_value
from verl.models.hub import DATA_SUFFIXES, DatasetPathError, ModelPathError, parse_hub_id
from verl.models.loader import resolve_model_path

__all__ = ["check_data_files", "prefetch_model", "resolve_config_paths"]


def _value(config: Any, dotted: str) -> Any:
    try:
        return get_config_value(config, dotted)
    except Exception:  # noqa: BLE001 - an unresolvable interpolation counts as unset here
        return None


def _model_keys(config: Any) -> list[tuple[str, bool]]:
    """``(dotted key, needs weights)`` of the model paths a run with ``config`` loads."""
    if _value(config, "actor_rollout_ref") is not None:  # PPO / GRPO
        from verl.trainer.config.ppo_checks import critic_enabled

        keys = [
            ("actor_rollout_ref.model.path", True),
            ("actor_rollout_ref.model.tokenizer_path", False),
            ("data.tokenizer", False),
        ]
        try:
            with_critic = critic_enabled(config)
        except Exception:  # noqa: BLE001 - a partial config (tests, the Python API): resolve what is there
            with_critic = False
        if with_critic:
            keys += [("critic.model.path", True), ("critic.model.tokenizer_path", False)]
        if bool(_value(config, "reward_model.enable")):
            keys += [("reward_model.model.path", True), ("reward_model.model.input_tokenizer", False)]
        return keys
    # offline trainers (SFT, DPO, KTO) and main_eval
    return [("model.path", True), ("model.tokenizer_path", False), ("ref.path", True)]


def prefetch_model(value: str, require_weights: bool = True) -> str | None:
    """Resolve (download when needed) a model path that is not an existing local path; None for a local path.

    Existing files and directories are left to their loader (a training checkpoint or a LoRA adapter is not a
    model directory but is accepted by ``verl serve`` and ``main_eval``).
    """
    if os.path.exists(os.path.expanduser(str(value))):
        return None
    return resolve_model_path(str(value), require_weights=require_weights)


def check_data_files(config: Any, keys: Iterable[str] = ("data.train_files", "data.val_files")) -> None:
    """Refuse a hub data set id given where parquet files are expected (one line naming the key)."""
    for key in keys:
        value = _value(config, key)
        if value is None or value == "":
            continue
        entries = [value] if isinstance(value, str) else list(value) if isinstance(value, Iterable) else [value]
        for entry in entries:
            entry = str(entry)
            if os.path.exists(os.path.expanduser(entry)) or entry.lower().endswith(DATA_SUFFIXES):
                continue
            if parse_hub_id(entry) is not None:
                raise DatasetPathError(
                    f"{key}: {entry!r} is not a file; it looks like a Hugging Face data set id, but {key} takes "
                    "parquet files in verl's schema: prepare them with a script in examples/data_preprocess/ (e.g. "
                    "`python examples/data_preprocess/gsm8k.py --local_save_dir ~/data/gsm8k`, then "
                    f"{key}=~/data/gsm8k/train.parquet)"
                )


def resolve_config_paths(config: Any) -> dict[str, str]:
    """On the driver, before any worker starts: resolve every model path of a run, downloading hub ids once.

    Checks the data files for hub data set ids too. Returns ``{dotted key: local directory}`` for the keys that
    were hub ids or bundled names (local paths are left to the loaders). Workers later resolve the same ids to the
    same cached snapshots without touching the network.

    Raises:
        ModelPathError / DatasetPathError: one line, prefixed with the config key.
    """
    check_data_files(config)
    resolved: dict[str, str] = {}
    for key, require_weights in _model_keys(config):
        value = _value(config, key)
        if not value or not isinstance(value, (str, os.PathLike)):
            continue
        try:
            local = prefetch_model(str(value), require_weights=require_weights)
        except ModelPathError as e:
            raise ModelPathError(f"{key}: {e}") from None
        if local is not None:
            resolved[key] = local
    return resolved
