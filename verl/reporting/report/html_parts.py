"""The building blocks of the report pages (``report.html``, ``verl compare``): escaping, numbers, tables, times.

Every piece of text from a run goes through :func:`esc` (:func:`html.escape`); :func:`table` takes cells that are
already HTML, so its callers build them with :func:`td` (escaped) or escape by hand.
"""

from __future__ import annotations

import datetime as _dt
import html
from collections.abc import Iterable, Sequence
from typing import Any


def esc(value: Any) -> str:
    """``value`` as text for HTML (None is empty; quotes escaped too, so it is safe inside attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def size_text(n: int) -> str:
    """A byte count for people: ``512 B``, ``2.0 KiB``, ``1.5 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def num(value: Any) -> str:
    """A metric value as short escaped text: ints as they are, floats to 4 decimals (or 4 significant digits when
    very large or small); anything else escaped."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return esc(value)
    if isinstance(value, int):
        return str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.4g}"
    return f"{value:.4f}".rstrip("0").rstrip(".") if "." in f"{value:.4f}" else f"{value}"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], table_id: str) -> str:
    """An HTML table; ``headers`` are escaped here, ``rows`` hold ready HTML cells (escaped by the caller)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def td(value: Any, numeric: bool = False) -> str:
    """One escaped table cell; ``numeric`` right-aligns it and formats it with :func:`num`."""
    return f'<td class="num">{num(value)}</td>' if numeric else f"<td>{esc(value)}</td>"


def local_time(ts: float) -> str:
    """A POSIX timestamp as local ISO 8601 with the UTC offset, to the second."""
    return _dt.datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")
