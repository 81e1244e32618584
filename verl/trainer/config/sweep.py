"""Hydra-style sweeps: ``-m key=a,b,c other=range(1,4)`` expands to one job per combination.

Hydra's basic sweeper semantics: the product over every swept override, the first swept key varying slowest;
``range(start, stop[, step])`` and ``choice(a, b)`` as in Hydra's override grammar (parsed by Hydra's own parser);
``hydra.sweeper.params`` in a YAML adds sweeps (a key swept on the command line wins). ``glob(...)`` and
``interval(...)`` need Hydra's config loader or a sampling sweeper and are refused with a message.

Without ``-m`` a value with a top-level comma is an error, as in Hydra 1.3 ("Ambiguous value"): a YAML list is
``key=[a,b]``, a string with a comma is ``key='a,b'``. Commas inside brackets, braces, quotes or ``${...}`` are part
of one value and never a sweep.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

from verl.trainer.config.overrides import parse_value
from verl.trainer.config.validation import ConfigError

_SWEEP_FUNC_RE = re.compile(r"^\s*(range|choice|glob|interval|shuffle|sort|tag)\s*\(")


def _split_top_level(value: str) -> list[str]:
    """``a,[b,c],'d,e'`` -> ``['a', '[b,c]', "'d,e'"]``: commas outside brackets, braces, parentheses and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    i = 0
    while i < len(value):
        ch = value[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(value[start:i])
            start = i + 1
        i += 1
    parts.append(value[start:])
    return parts


def _as_token_value(text: str, typed: Any) -> str:
    """An element of a sweep written so the loader's YAML value parser reads back ``typed``."""
    try:
        if parse_value(text) == typed:
            return text
    except ConfigError:
        pass
    return json.dumps(typed)


@dataclass(frozen=True)
class Sweep:
    """One swept override: its text, the part before ``=`` (prefix and key) and the values, one token each."""

    text: str
    head: str
    values: tuple[str, ...]


def parse_sweep(text: str) -> Sweep | None:
    """The sweep in one override (``key=a,b``, ``key=range(1,3)``, ``key=choice(a,b)``), or None when it has none."""
    body = text.strip()
    if body.startswith("~") or "=" not in body:
        return None
    head, raw = body.split("=", 1)
    is_func = bool(_SWEEP_FUNC_RE.match(raw))
    parts = _split_top_level(raw)
    if not is_func and len(parts) < 2:
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        (ov,) = OverridesParser.create().parse_overrides([body])
    except Exception as e:  # noqa: BLE001 - Hydra's grammar is stricter than the YAML values accepted here
        if is_func:
            raise ConfigError(f"override {text!r}: {_first_line(e)}") from e
        return Sweep(text, head, tuple(p.strip() for p in parts))
    if not ov.is_sweep_override():
        return None
    if ov.is_interval_sweep():
        raise ConfigError(f"override {text!r}: interval() needs a sampling sweeper; use range(...) or a list a,b,c")
    if is_func and raw.lstrip().startswith("glob"):
        raise ConfigError(f"override {text!r}: glob() sweeps are not supported here; list the options: a,b,c")
    texts = list(ov.sweep_string_iterator())
    typed = list(ov.sweep_iterator())
    return Sweep(text, head, tuple(_as_token_value(s, v) for s, v in zip(texts, typed, strict=True)))


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def reject_sweeps(overrides: list[str]) -> None:
    """Without ``-m``: a sweep value is an error naming the override and the three things it could mean.

    Raises:
        ConfigError: one line per swept override.
    """
    problems = []
    for text in overrides:
        if not isinstance(text, str):
            continue
        sweep = parse_sweep(text)
        if sweep is None:
            continue
        head = sweep.head.lstrip("+~")
        if _SWEEP_FUNC_RE.match(text.split("=", 1)[1]):
            problems.append(f"override {text!r}: a sweep needs -m/--multirun")
        else:
            problems.append(
                f"override {text!r}: ambiguous value: write {head}=[{','.join(sweep.values)}] for a list, "
                f"{head}='{text.split('=', 1)[1]}' for a string, or add -m/--multirun to run one job per value"
            )
    if problems:
        raise ConfigError(problems)


def expand(overrides: list[str], yaml_params: dict[str, Any] | None = None) -> list[list[str]]:
    """Every job's override list: the product over the swept overrides (first one slowest), as Hydra's basic
    sweeper orders them. ``yaml_params`` (``hydra.sweeper.params``: key -> ``'a,b'``) go first; a key given on the
    command line replaces the YAML's sweep of it."""
    cli_keys = {text.lstrip("+~").split("=", 1)[0].strip() for text in overrides}
    items = [f"{k}={v}" for k, v in (yaml_params or {}).items() if k not in cli_keys]
    choices: list[list[str]] = []
    for text in [*items, *overrides]:
        sweep = parse_sweep(text)
        choices.append([f"{sweep.head}={v}" for v in sweep.values] if sweep else [text])
    return [list(combo) for combo in itertools.product(*choices)]


def override_dirname(
    overrides: list[str], kv_sep: str = "=", item_sep: str = ",", exclude: list[str] | None = None
) -> str:
    """Hydra's ``hydra.job.override_dirname``: the job's overrides sorted and joined (``a=1,b=x``)."""
    excluded = set(exclude or [])
    lines = sorted(t for t in overrides if t.lstrip("+~").split("=", 1)[0] not in excluded)
    return item_sep.join(lines).replace("=", kv_sep)
