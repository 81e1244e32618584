"""Check a config against its dataclass schema: unknown keys, types, choices, then the schema's cross-field checks.

All problems are collected and raised together as one :class:`ConfigError` (one problem per line), so a user fixes
a command line in one go rather than one error per run. Every line starts with the full dotted key.
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import functools
import re
import types
import typing
import warnings
from collections.abc import Iterable
from typing import Any, Literal, Union

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl.utils.errors import ConfigError, ConfigWarning

__all__ = ["CHECKING_ILL_TYPED", "ConfigError", "ConfigWarning", "independent_problems", "validate_config"]

# True while the cross-field checks run on a config that already failed the type checks: a check may then trip
# over an ill-typed value, and its caller skips that one check (see run_check) instead of losing the others
CHECKING_ILL_TYPED: contextvars.ContextVar[bool] = contextvars.ContextVar("verl_checking_ill_typed", default=False)


def run_check(check: Any, *args: Any) -> None:
    """Call one cross-field ``check(*args)``; on an ill-typed config (:data:`CHECKING_ILL_TYPED`) a crash of its
    arithmetic skips just that check, on a well-typed one it propagates (it is a bug)."""
    if not CHECKING_ILL_TYPED.get():
        check(*args)
        return
    try:
        check(*args)
    except (ArithmeticError, TypeError, ValueError, AttributeError, KeyError):
        pass


def validate_config(cfg: DictConfig, schema: type, extra_keys: Iterable[str] = ()) -> list[str]:
    """Validate ``cfg`` against the dataclass ``schema`` and return the warnings (also emitted as ConfigWarning).

    Checks, in order: every key is a field of its section (otherwise the closest valid names are suggested), every
    field is present, every value has the annotated type (``Optional``/``Literal``/``list``/``dict``/nested
    dataclass), and finally ``schema.cross_field_checks(cfg)`` when the schema defines it. ``extra_keys`` are the
    dotted paths added with ``+key=value``: they and everything under them are exempt from the unknown-key check,
    and each one that lands in a typed section beside its fields gets a warning (nothing built in reads it, so a
    misspelt ``+actor_rollout_ref.actor.clip_ratio_hihg`` would otherwise pass unnoticed; code of the user's own
    that reads the config can use it).

    Harmless conversions are written back into ``cfg``: an int for a float field becomes a float, a number for a
    string field becomes a string, a bare string for a ``list[str]`` field becomes a one-item list.

    Raises:
        ConfigError: listing every problem found, one per line.
    """
    errors: list[str] = []
    added_unread: list[str] = []
    _check_section(cfg, schema, "", frozenset(extra_keys), errors, added_unread)
    warns: list[str] = list(added_unread)
    checks = getattr(schema, "cross_field_checks", None)
    if callable(checks) and not errors:
        more_errors, more_warns = checks(cfg)
        warns.extend(more_warns)
        errors.extend(more_errors)
    elif callable(checks):
        # the cross-field checks run on the ill-typed config too, so every mistake is reported at once; what they
        # say about a key already reported (or a crash of their arithmetic on a bad value) is left out as noise
        token = CHECKING_ILL_TYPED.set(True)
        try:
            more_errors, _ = checks(cfg)
        except Exception:  # noqa: BLE001 - a check tripping over an ill-typed value: the type error says it all
            more_errors = []
        finally:
            CHECKING_ILL_TYPED.reset(token)
        errors.extend(independent_problems(errors, more_errors))
    if errors:
        raise ConfigError(errors)
    for w in warns:
        warnings.warn(w, ConfigWarning, stacklevel=2)
    return warns


def _keys_named(message: str) -> set[str]:
    """The dotted config keys (``a.b.c``) a problem message names."""
    return set(re.findall(r"\b[a-z_]+(?:\.[a-z_0-9]+)+\b", message))


def independent_problems(reported: list[str], more: list[str]) -> list[str]:
    """The messages of ``more`` that name none of the keys the ``reported`` messages lead with (``key: ...``,
    ``key=value ...``): those are knock-on effects of a mistake already reported, not mistakes of their own."""
    leading = set()
    for message in reported:
        match = re.match(r"[A-Za-z_][\w.]*", message)
        if match:
            leading.add(match.group(0))
    return [m for m in more if m not in reported and not (_keys_named(m) & leading)]


def _is_exempt(path: str, extra_keys: frozenset[str]) -> bool:
    """Whether ``path`` was added with ``+`` (or lies on the way to / under a key that was)."""
    return any(path == k or k.startswith(path + ".") or path.startswith(k + ".") for k in extra_keys)


@functools.cache
def _section_fields(schema: type) -> tuple[dict[str, Any], list[str]]:
    """A schema dataclass's resolved field types and field names (resolving the hints is the slow part of a check)."""
    return typing.get_type_hints(schema), [f.name for f in dataclasses.fields(schema)]


def _check_section(
    node: Any, schema: type, prefix: str, extra_keys: frozenset[str], errors: list[str], added_unread: list[str]
) -> None:
    """Check one dataclass-typed section ``node`` (at dotted path ``prefix``) and recurse into sub-sections; a key
    added with ``+`` beside the section's fields goes into ``added_unread`` (a warning), any other unknown key into
    ``errors``."""
    where = prefix.rstrip(".") or "<root>"
    if not isinstance(node, DictConfig):
        errors.append(f"{where}: expected a section (mapping) of {schema.__name__}, got {_show(node)}")
        return
    hints, names = _section_fields(schema)
    for key in node.keys():
        key = str(key)
        path = f"{prefix}{key}"
        if key in hints:
            continue
        if _is_exempt(path, extra_keys):
            # a section whose entries are added with + (a map such as distillation.teacher_models) reads them
            if not getattr(schema, "entries_added_with_plus", False):
                added_unread.append(_added_key_message(path, key, names, prefix))
            continue
        errors.append(_unknown_key_message(path, key, names, prefix))
    for name in names:
        path = f"{prefix}{name}"
        if name not in node:
            errors.append(f"{path}: missing key (expected {_type_name(hints[name])})")
            continue
        if OmegaConf.is_missing(node, name):
            errors.append(f"{path}: no value given (??? in the config); set it with {path}=...")
            continue
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            _check_section(node[name], tp, path + ".", extra_keys, errors, added_unread)
            continue
        ok, value = _check_value(node[name], tp, path, errors)
        if ok and value is not _UNCHANGED:
            node[name] = value


def _unknown_key_message(path: str, key: str, valid: list[str], prefix: str) -> str:
    """``a.b.kye: unknown key; did you mean a.b.key?`` (closest names by difflib, or the list of valid keys)."""
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.6)
    if close:
        hint = "did you mean " + " or ".join(f"{prefix}{c}" for c in close) + "?"
    else:
        hint = f"valid keys here: {', '.join(valid)}"
    return f"{path}: unknown key; {hint} (to add a new key on purpose, use +{path}=...)"


def _added_key_message(path: str, key: str, valid: list[str], prefix: str) -> str:
    """The warning for a key added with ``+`` where the schema has no such field (``_check_section``)."""
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(f'{prefix}{c}' for c in close)}?" if close else ""
    return (
        f"{path}: added with +, but it is not a key of this config, so nothing in verl reads it (only code of your "
        f"own that reads the config can){hint}"
    )


# Sentinel: the value is valid as it is (nothing to write back).
_UNCHANGED = object()


def _check_value(value: Any, tp: Any, path: str, errors: list[str]) -> tuple[bool, Any]:
    """Check ``value`` against annotation ``tp``; returns ``(ok, converted_or__UNCHANGED)`` and appends errors."""
    ok, converted = _match(value, tp)
    if ok:
        return True, converted
    if typing.get_origin(tp) is Literal or (_is_optional(tp) and typing.get_origin(_strip_none(tp)) is Literal):
        choices = [str(c) for c in typing.get_args(_strip_none(tp))]
        msg = f"{path}: expected one of {_type_name(tp)}, got {_show(value)}"
        close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.5) if isinstance(value, str) else []
        if close:
            msg += f"; did you mean {close[0]!r}?"
        errors.append(msg)
    else:
        errors.append(f"{path}: expected {_type_name(tp)}, got {_show(value)}")
    return False, _UNCHANGED


def _match(value: Any, tp: Any) -> tuple[bool, Any]:
    """Whether ``value`` fits ``tp``; the second item is a converted value or ``_UNCHANGED``."""
    if tp is Any:
        return True, _UNCHANGED
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if value is None:
            return type(None) in args, _UNCHANGED
        # An exact match wins over a conversion (a str for Union[str, list[str]] stays a str).
        results = [_match(value, a) for a in args if a is not type(None)]
        for ok, conv in results:
            if ok and conv is _UNCHANGED:
                return True, _UNCHANGED
        for ok, conv in results:
            if ok:
                return True, conv
        return False, _UNCHANGED
    if value is None:
        return False, _UNCHANGED
    if origin is Literal:
        return any(value == c and type(value) is type(c) for c in typing.get_args(tp)), _UNCHANGED
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if isinstance(value, str) and _match(value, item_tp)[0]:
            return True, [value]  # `trainer.logger=console` means a one-item list
        if not isinstance(value, (ListConfig, list)):
            return False, _UNCHANGED
        items = list(value)
        converted = []
        changed = False
        for item in items:
            ok, conv = _match(item, item_tp)
            if not ok:
                return False, _UNCHANGED
            changed = changed or conv is not _UNCHANGED
            converted.append(item if conv is _UNCHANGED else conv)
        return True, (converted if changed else _UNCHANGED)
    if origin is dict or tp is dict:
        return isinstance(value, (DictConfig, dict)), _UNCHANGED
    if tp is bool:
        return isinstance(value, bool), _UNCHANGED
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), _UNCHANGED
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False, _UNCHANGED
        return True, (float(value) if isinstance(value, int) else _UNCHANGED)
    if tp is str:
        if isinstance(value, str):
            return True, _UNCHANGED
        # `trainer.experiment_name=2024` parses as an int; a name is still what the user meant.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, str(value)
        return False, _UNCHANGED
    raise TypeError(f"schema annotation {tp!r} is not supported by validate_config")


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def _strip_none(tp: Any) -> Any:
    """``Optional[X]`` -> ``X`` (anything else unchanged)."""
    if not _is_optional(tp):
        return tp
    rest = [a for a in typing.get_args(tp) if a is not type(None)]
    return rest[0] if len(rest) == 1 else Union[tuple(rest)]


def _type_name(tp: Any) -> str:
    """A readable name for an annotation: ``int``, ``float or null``, ``hf, vllm``, ``list[str]``, ..."""
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        names = [_type_name(a) for a in typing.get_args(tp) if a is not type(None)]
        if type(None) in typing.get_args(tp):
            names.append("null")
        return " or ".join(names)
    if origin is Literal:
        return ", ".join(str(c) for c in typing.get_args(tp))
    if origin is list:
        return f"list[{_type_name(typing.get_args(tp)[0])}]" if typing.get_args(tp) else "list"
    if origin is dict or tp is dict:
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return f"section {tp.__name__}"
    return getattr(tp, "__name__", str(tp))


def _show(value: Any) -> str:
    """The value as the user would recognise it: ``'abc'``, ``1.5``, ``[1, 2]``, ``null``."""
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=False)
    if value is None:
        return "null"
    shown = repr(value)
    if isinstance(value, str):
        return shown
    return f"{shown} ({type(value).__name__})"
