"""Plot metrics from a run's ``metrics.jsonl`` (the ``file`` tracking backend) into a PNG."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence

from verl.utils.fs import atomic_write_bytes

__all__ = ["collect_series", "plot_metrics", "read_metrics_jsonl"]

logger = logging.getLogger(__name__)


def read_metrics_jsonl(jsonl_path: str) -> list[tuple[int, dict[str, float | None]]]:
    """Read ``{"step": N, "metrics": {...}}`` lines into ``[(step, metrics), ...]`` in file order.

    Blank lines are skipped; a malformed line raises a ValueError naming the file and line number.
    """
    if not os.path.isfile(jsonl_path):
        raise FileNotFoundError(f"metrics file {jsonl_path} does not exist")
    rows: list[tuple[int, dict[str, float | None]]] = []
    with open(jsonl_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                step, metrics = int(rec["step"]), rec["metrics"]
                if not isinstance(metrics, dict):
                    raise TypeError("'metrics' is not an object")
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise ValueError(
                    f'{jsonl_path}:{lineno}: not a metrics record (expected {{"step": N, "metrics": {{...}}}}): {e}'
                ) from e
            rows.append((step, metrics))
    return rows


def collect_series(
    rows: list[tuple[int, dict[str, float | None]]], keys: Sequence[str]
) -> dict[str, tuple[list[int], list[float], bool]]:
    """Per key present in ``rows``: ``(steps, values, sparse)``; ``sparse`` when logged at fewer steps than the run.

    ``null``/non-finite values are dropped; keys with no finite value are left out.
    """
    all_steps = {step for step, _ in rows}
    series: dict[str, tuple[list[int], list[float], bool]] = {}
    for key in keys:
        xs, ys, logged_at = [], [], set()
        for step, metrics in rows:
            if key in metrics:  # a null (non-finite) entry still counts as logged for density
                logged_at.add(step)
            value = metrics.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                xs.append(step)
                ys.append(float(value))
        if xs:
            series[key] = (xs, ys, len(logged_at) < len(all_steps))
    return series


def plot_metrics(
    jsonl_path: str,
    png_path: str,
    keys: Sequence[str] = ("critic/score/mean", "response_length/mean"),
    title: str | None = None,
) -> str | None:
    """Plot each of ``keys`` against the step, one subplot per key, into ``png_path`` (written atomically).

    A key logged at every step is drawn as a line; a sparse key (logged at fewer steps than the run has, such as
    ``val-core/...`` validation metrics) is drawn as markers joined by a thin line. ``null`` (non-finite) values
    are skipped. Keys absent from the file are skipped with a warning; if none is present, nothing is written
    and None is returned. Returns ``png_path`` otherwise.
    """
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on training nodes
    import io

    import matplotlib.pyplot as plt

    series = collect_series(read_metrics_jsonl(jsonl_path), keys)
    for key in keys:
        if key not in series:
            logger.warning("plot_metrics: key %r not found in %s; skipping it", key, jsonl_path)
    if not series:
        logger.warning("plot_metrics: none of %s in %s; no plot written", list(keys), jsonl_path)
        return None

    fig, axes = plt.subplots(len(series), 1, figsize=(7, 2.6 * len(series)), sharex=True, squeeze=False)
    for ax, (key, (xs, ys, sparse)) in zip(axes[:, 0], series.items()):
        if sparse:
            ax.plot(xs, ys, marker="o", linestyle="-", linewidth=0.8)
        else:
            ax.plot(xs, ys, linewidth=1.5)
        ax.set_ylabel(key, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(png_path, buf.getvalue())
    return png_path
