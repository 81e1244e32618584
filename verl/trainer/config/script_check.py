"""Is a launch script's override kept by the resolved config?  The "faithful" check shared by the upstream-script
harness (``scripts/upstream_scripts.py``) and the tests of upstream-style scripts.

A ``key=value`` (or ``+key=value``, ``++key=value``) override is *found* when the resolved config holds, at the key
(after the schema's key aliases, e.g. ``critic.model.fsdp_config`` -> ``critic.fsdp_config``), the value the override
parsed to. Numbers compare by value (``1e-6`` equals ``1.0e-06``; an int given to a float key equals its float) and a
number given to a string key equals its text (``trainer.experiment_name=2024``).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.overrides import parse_override, rename_aliased_key

_ABSENT = object()


def value_at(cfg: Any, key: str) -> Any:
    """The plain value at dotted ``key`` of ``cfg`` (a ``DictConfig`` or the plain dict of ``--cfg job``'s YAML);
    a private sentinel when the key is absent."""
    if isinstance(cfg, DictConfig):
        value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    node = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def same_value(got: Any, want: Any) -> bool:
    """Whether a resolved value ``got`` is what an override asked for (``want``), up to harmless conversions."""
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return float(got) == float(want)
    if isinstance(want, (int, float)) and isinstance(got, str):
        return got == str(want)
    if isinstance(want, str) and isinstance(got, list):
        return got == [want]  # trainer.logger=console is a one-item list
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(same_value(g, w) for g, w in zip(got, want))
    if isinstance(want, dict) and isinstance(got, dict):
        return all(k in got and same_value(got[k], v) for k, v in want.items())
    return got == want


def override_found(text: str, cfg: Any, aliases: dict[str, str] | None = None) -> bool:
    """Whether the override ``text`` (``[+|++]key=value``) is kept at its key in the resolved ``cfg``.

    Deletions (``~key``) are found when the key is absent.
    """
    ov = parse_override(text)
    key = rename_aliased_key(ov.key, aliases or {})
    got = value_at(cfg, key)
    if ov.op == "delete":
        return got is _ABSENT
    return got is not _ABSENT and same_value(got, ov.value)


def schema_aliases(module: Any) -> dict[str, str]:
    """The ``key_aliases`` of the config schema an entry module (``verl.trainer.main_ppo``, ...) builds with; an
    entry that only wraps another (``one_step_off_policy.main_ppo`` calls ``main_ppo.main``) has its wrapped entry's
    schema."""
    import importlib

    found = _aliases_in(module)
    if found is not None:
        return found
    for obj in vars(module).values():
        wrapped = getattr(obj, "__module__", None) if callable(obj) else None
        if isinstance(wrapped, str) and wrapped != module.__name__ and wrapped.startswith("verl."):
            found = _aliases_in(importlib.import_module(wrapped))
            if found is not None:
                return found
    return {}


def _aliases_in(module: Any) -> dict[str, str] | None:
    for obj in vars(module).values():
        if isinstance(obj, type) and isinstance(getattr(obj, "config_name", None), str):
            aliases = getattr(obj, "key_aliases", None)
            if isinstance(aliases, dict):
                return dict(aliases)
    return None
