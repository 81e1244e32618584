"""Plots of a run's ``metrics.jsonl`` (the ``file`` tracking backend): ``metrics.png`` and the report's SVG charts.

:data:`PANELS` is the one place that decides what is drawn for each trainer kind (``ppo``, ``sft``, ``dpo``, ``kto``,
``gkd``): the PNG written next to the checkpoints and the charts of ``report.html`` (:mod:`verl.reporting.report`)
are both drawn from it. A panel names metrics exactly or with ``fnmatch`` patterns (``val-core/*/mean@*``); the keys a
run actually logged are matched, and a panel none of whose keys was logged is left out, so a GRPO run shows no critic
panel and an SFT run without an eval set shows no eval curve.

Drawing rules: a metric logged at every step is a line; one logged at fewer steps (validation, evaluation) is drawn
with markers, and a panel with ``annotate`` writes each point's value next to it (the held-out accuracy before and
after training is readable with only two points). ``timing_s/*`` is drawn as stacked bars per step, with the part
of ``timing_s/step`` no phase accounts for as ``other``.
"""

from __future__ import annotations

import fnmatch
import io
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from verl.utils.fs import atomic_write_bytes

__all__ = [
    "PANELS",
    "TRAINER_KINDS",
    "MetricsFileError",
    "Panel",
    "ResolvedPanel",
    "collect_series",
    "guess_trainer_kind",
    "plot_metrics",
    "plot_run",
    "read_metrics_jsonl",
    "render_overlay_svg",
    "render_panel_svg",
    "render_panels_png",
    "resolve_panels",
    "run_colors",
]

logger = logging.getLogger(__name__)

Rows = list[tuple[int, dict[str, Any]]]


class MetricsFileError(ValueError):
    """A line of ``metrics.jsonl`` that is not a ``{"step": N, "metrics": {...}}`` record (names file and line)."""


# ----------------------------------------------------------------------------------------------- the panels
@dataclass(frozen=True)
class Panel:
    """One chart: a title, the metrics it draws (exact names or fnmatch patterns, in legend order) and how.

    ``style``: ``line`` (one curve per metric) or ``stacked`` (bars per step, one segment per metric, for the time
    per phase). ``exclude``: patterns dropped after matching. ``annotate``: write the value at each point (at the
    first and last when there are more than 12), for sparse metrics such as validation accuracy. ``percent``: the
    values are fractions in [0, 1], shown as percentages in annotations.
    """

    title: str
    keys: tuple[str, ...]
    ylabel: str = ""
    style: str = "line"
    exclude: tuple[str, ...] = ()
    annotate: bool = False
    percent: bool = False


@dataclass(frozen=True)
class ResolvedPanel:
    """A :class:`Panel` with the concrete metric names of one run (``keys``, in the panel's order)."""

    panel: Panel
    keys: tuple[str, ...]

    @property
    def title(self) -> str:
        return self.panel.title


_LR_GRAD = (
    Panel("Learning rate", ("lr",), "lr"),
    Panel("Gradient norm (before clipping)", ("grad_norm",), "norm"),
)
_OFFLINE_PERF = (
    Panel("Throughput", ("perf/throughput",), "tokens / s / rank"),
    Panel("Time per step", ("perf/time_per_step",), "seconds"),
)
_PREFERENCE = (
    Panel("Loss", ("loss", "eval/loss"), "loss"),
    Panel("Implicit rewards", ("rewards/chosen", "rewards/rejected", "eval/rewards/chosen", "eval/rewards/rejected")),
    Panel("Reward margin (chosen - rejected)", ("rewards/margins", "eval/rewards/margins"), "margin", annotate=True),
    Panel("Preference accuracy", ("rewards/accuracies", "eval/rewards/accuracies"), "fraction", percent=True),
    Panel("Policy log-probs", ("logps/chosen", "logps/rejected"), "sum log p"),
)

PANELS: dict[str, tuple[Panel, ...]] = {
    # PPO and every estimator that runs through the same driver (GRPO, RLOO, REINFORCE++, ReMax, DAPO settings)
    "ppo": (
        Panel(
            "Training reward",
            ("critic/score/mean", "critic/rewards/mean", "reward_extra/*/mean"),
            "mean per sequence",
        ),
        Panel("Validation (held-out)", ("val-core/*/mean@*",), "mean@N", annotate=True),
        Panel(
            "KL",
            ("actor/ppo_kl", "actor/kl_loss", "actor/reward_kl_penalty", "eval/kl_ref"),
            "nats / token",
        ),
        Panel("Entropy", ("actor/entropy",), "nats / token"),
        Panel("Policy loss", ("actor/pg_loss", "actor/pg_clipfrac"), ""),
        Panel("Response length", ("response_length/mean", "response_length/max", "response_length/min"), "tokens"),
        Panel("Time per phase", ("timing_s/*",), "seconds", style="stacked", exclude=("timing_s/step",)),
        Panel("Throughput", ("perf/throughput",), "tokens / s / rank"),
        Panel("Model FLOPs utilisation", ("perf/mfu/*",), "fraction of peak", percent=True),
        Panel("Gradient norm", ("actor/grad_norm", "critic/grad_norm"), "norm"),
        Panel("Critic: value loss and explained variance", ("critic/vf_loss", "critic/vf_explained_var"), ""),
        Panel("Critic: values", ("critic/values/mean", "critic/vpred_mean"), ""),
        Panel("Learning rate", ("actor/lr", "critic/lr"), "lr"),
    ),
    "sft": (
        Panel("Loss", ("loss", "eval/loss"), "loss / token", annotate=False),
        *_LR_GRAD,
        *_OFFLINE_PERF,
    ),
    "dpo": (*_PREFERENCE, *_LR_GRAD, *_OFFLINE_PERF),
    "kto": (*_PREFERENCE, Panel("KL reference point z0", ("kl", "eval/kl"), "nats"), *_LR_GRAD, *_OFFLINE_PERF),
    # generalized knowledge distillation (verl/trainer/offline/gkd.py): the divergence to the teacher
    "gkd": (
        Panel("Distillation loss", ("loss", "eval/loss"), "loss / token"),
        Panel("Reverse KL to the teacher", ("distill/reverse_kl", "eval/distill/reverse_kl"), "nats / token"),
        Panel("On-policy steps (student's own samples)", ("distill/on_policy",), "fraction", percent=True),
        Panel("Response length", ("response_length",), "tokens"),
        *_LR_GRAD,
        *_OFFLINE_PERF,
    ),
}
TRAINER_KINDS = tuple(PANELS)


def guess_trainer_kind(keys: Iterable[str]) -> str:
    """The trainer kind whose metrics these are: ``ppo`` (``actor/*``), ``gkd`` (``distill/*``), ``kto`` (``kl``
    with ``rewards/*``), ``dpo`` (``rewards/*``), else ``sft``. For run directories that do not record their kind."""
    keys = set(keys)
    if any(k.startswith(("actor/", "critic/", "val-core/")) for k in keys):
        return "ppo"
    if any(k.startswith(("distill/", "eval/distill/")) for k in keys):
        return "gkd"
    if "rewards/margins" in keys or "eval/rewards/margins" in keys:
        return "kto" if ("kl" in keys or "eval/kl" in keys) else "dpo"
    return "sft"


def _natural(key: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key)]


def resolve_panels(kind: str, available: Iterable[str]) -> list[ResolvedPanel]:
    """The panels of trainer ``kind`` with the metric names ``available`` in a run; empty panels are dropped.

    Exact keys keep the panel's order; the matches of a pattern follow in natural order (``mean@2`` before
    ``mean@10``). Raises ValueError for an unknown kind.
    """
    if kind not in PANELS:
        raise ValueError(f"unknown trainer kind {kind!r}; expected one of {', '.join(TRAINER_KINDS)}")
    names = sorted(set(available), key=_natural)
    out: list[ResolvedPanel] = []
    for panel in PANELS[kind]:
        chosen: list[str] = []
        for pattern in panel.keys:
            matches = [n for n in names if fnmatch.fnmatchcase(n, pattern)] if "*" in pattern else [pattern]
            for name in matches:
                if (
                    name in names
                    and name not in chosen
                    and not any(fnmatch.fnmatchcase(name, x) for x in panel.exclude)
                ):
                    chosen.append(name)
        if chosen:
            out.append(ResolvedPanel(panel, tuple(chosen)))
    return out


# --------------------------------------------------------------------------------------------- reading data
def read_metrics_jsonl(jsonl_path: str, problems: list[str] | None = None) -> Rows:
    """Read ``{"step": N, "metrics": {...}}`` lines into ``[(step, metrics), ...]`` in file order.

    Blank lines are skipped. A malformed line raises :class:`MetricsFileError` (a ValueError) naming the file and
    line number; with a ``problems`` list, the message is appended to it instead and the line skipped (the report
    shows what it could read and lists what it could not).
    """
    if not os.path.isfile(jsonl_path):
        raise FileNotFoundError(f"metrics file {jsonl_path} does not exist")
    rows: Rows = []
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
                message = (
                    f'{jsonl_path}:{lineno}: not a metrics record (expected {{"step": N, "metrics": {{...}}}}): {e}'
                )
                if problems is None:
                    raise MetricsFileError(message) from e
                problems.append(message)
                continue
            rows.append((step, metrics))
    return rows


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def collect_series(rows: Rows, keys: Sequence[str]) -> dict[str, tuple[list[int], list[float], bool]]:
    """Per key present in ``rows``: ``(steps, values, sparse)`` sorted by step; ``sparse`` when the key was logged at
    fewer steps than the run has.

    ``null``/non-finite values are dropped; a key logged twice at one step keeps the later value (an evaluation row
    after the training row of the same step); keys with no finite value are left out.
    """
    all_steps = {step for step, _ in rows}
    series: dict[str, tuple[list[int], list[float], bool]] = {}
    for key in keys:
        by_step: dict[int, float] = {}
        logged_at: set[int] = set()
        for step, metrics in rows:
            if key in metrics:  # a null (non-finite) entry still counts as logged for density
                logged_at.add(step)
            value = metrics.get(key)
            if _finite(value):
                by_step[step] = float(value)
        if by_step:
            xs = sorted(by_step)
            series[key] = (xs, [by_step[x] for x in xs], len(logged_at) < len(all_steps))
    return series


def available_keys(rows: Rows) -> list[str]:
    """Every metric name that has at least one finite value in ``rows``."""
    keys: dict[str, None] = {}
    for _, metrics in rows:
        for key, value in metrics.items():
            if _finite(value):
                keys[key] = None
    return list(keys)


# ------------------------------------------------------------------------------------------------- drawing
def _fmt_value(value: float, percent: bool) -> str:
    if percent:
        return f"{100 * value:.1f}%"
    if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.4g}"


def _short_label(key: str, keys: Sequence[str]) -> str:
    """The legend label: the key without the prefix every key of the panel shares (``timing_s/gen`` -> ``gen``)."""
    if len(keys) < 2:
        return key
    prefix = os.path.commonprefix(list(keys))
    prefix = prefix[: prefix.rfind("/") + 1] if "/" in prefix else ""
    return key[len(prefix) :] or key


def _draw_stacked(ax: Any, rows: Rows, keys: Sequence[str]) -> None:
    """Stacked bars per step of the ``timing_s/*`` phases; ``other`` is ``timing_s/step`` minus the phases in it."""
    series = collect_series(rows, [*keys, "timing_s/step"])
    steps = sorted({s for k in keys if k in series for s in series[k][0]})
    if not steps:
        return
    index = {s: i for i, s in enumerate(steps)}
    bottoms = [0.0] * len(steps)
    inner = [0.0] * len(steps)  # seconds of the phases that run inside timing_s/step
    outside = {"timing_s/testing", "timing_s/save_checkpoint"}
    colors = _colors(len(keys) + 1)
    for color, key in zip(colors, keys):
        if key not in series:
            continue
        heights = [0.0] * len(steps)
        for s, v in zip(*series[key][:2]):
            heights[index[s]] = v
            if key not in outside:
                inner[index[s]] += v
        ax.bar(steps, heights, bottom=bottoms, color=color, label=_short_label(key, keys), width=0.8)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    if "timing_s/step" in series:
        other = [0.0] * len(steps)
        for s, total in zip(*series["timing_s/step"][:2]):
            if s in index:
                other[index[s]] = max(total - inner[index[s]], 0.0)
        if any(o > 0 for o in other):
            ax.bar(steps, other, bottom=bottoms, color=colors[-1], label="other", width=0.8, hatch="//", alpha=0.5)


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _plot_curve(
    ax: Any, xs: list[int], ys: list[float], sparse: bool, color: Any, style: str, label: str, panel: Panel
) -> Any:
    """One curve of a panel: markers when ``sparse`` or short (a 1-point curve would be invisible), a line
    otherwise; the values written next to the points when the panel annotates. Returns the matplotlib line."""
    few = len(xs) <= 30
    if sparse or few:
        ax.plot(xs, ys, marker="o", markersize=5 if sparse else 3, linewidth=1.0, color=color, linestyle=style)
    else:
        ax.plot(xs, ys, linewidth=1.5, color=color, linestyle=style)
    line = ax.lines[-1]
    line.set_label(label)
    if panel.annotate:
        points = list(zip(xs, ys)) if len(xs) <= 12 else [(xs[0], ys[0]), (xs[-1], ys[-1])]
        for x, y in points:
            ax.annotate(
                _fmt_value(y, panel.percent),
                (x, y),
                textcoords="offset points",
                xytext=(0, 7),
                ha="center",
                fontsize=8,
                color=color,
            )
    return line


def _decorate(ax: Any, panel: Panel, dense_points: int) -> None:
    """Title, axis labels, grid, integer steps and legend of a drawn panel."""
    ax.set_title(panel.title, fontsize=10)
    if panel.ylabel:
        ax.set_ylabel(panel.ylabel, fontsize=8)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    with_offset = getattr(ax.yaxis.get_major_formatter(), "set_useOffset", None)
    if with_offset is not None:  # "1e-5+5.5437" above the axis reads badly: full tick values instead
        with_offset(False)
    if dense_points:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best", framealpha=0.7)


def _draw_panel(ax: Any, rows: Rows, resolved: ResolvedPanel, dense_points: int) -> None:
    panel = resolved.panel
    keys = resolved.keys
    if panel.style == "stacked":
        _draw_stacked(ax, rows, keys)
    else:
        series = collect_series(rows, keys)
        palette = dict(zip(keys, _colors(len(keys))))
        for key in keys:
            if key not in series:
                continue
            xs, ys, sparse = series[key]
            train_key = key.removeprefix("eval/")
            # an evaluation curve takes its training curve's colour, dashed: eval/loss next to loss
            color = palette[train_key] if train_key != key and train_key in palette else palette[key]
            style = "--" if train_key != key and train_key in palette else "-"
            _plot_curve(ax, xs, ys, sparse, color, style, _short_label(key, keys), panel)
        if panel.annotate:
            ax.margins(y=0.2)
    _decorate(ax, panel, dense_points)


def _figure(width: float, height: float) -> Any:
    # a bare Figure, not pyplot: no global backend switch and no figure registry in a training process
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def render_panels_png(rows: Rows, panels: Sequence[ResolvedPanel], title: str | None = None, dpi: int = 90) -> bytes:
    """All ``panels`` as one PNG (two columns), the bytes of the file."""
    ncols = 2 if len(panels) > 1 else 1
    nrows = math.ceil(len(panels) / ncols)
    fig = _figure(6.0 * ncols, 3.2 * nrows + (0.4 if title else 0))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for i, resolved in enumerate(panels):
        _draw_panel(axes[i // ncols][i % ncols], rows, resolved, len(rows))
    for j in range(len(panels), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    if title:
        fig.suptitle(title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def render_panel_svg(rows: Rows, resolved: ResolvedPanel, id_prefix: str = "") -> str:
    """One panel as an inline ``<svg>`` element (text kept as text, no XML prolog), for embedding in HTML.

    ``id_prefix`` is put before every element id and reference in it, so several charts in one page keep their ids
    (matplotlib numbers ``line2d_1``, ``patch_1``, ... from 1 in each figure) unique.
    """
    fig = _figure(6.0, 3.3)
    _draw_panel(fig.subplots(), rows, resolved, len(rows))
    return _svg_text(fig, id_prefix)


def run_colors(n: int) -> list[str]:
    """The colours of ``n`` runs in :func:`render_overlay_svg`, as ``#rrggbb`` (for the page's legend swatches)."""
    from matplotlib.colors import to_hex

    return [to_hex(c) for c in _colors(max(n, 1))][:n]


def render_overlay_svg(runs: Sequence[tuple[str, Rows]], resolved: ResolvedPanel, id_prefix: str = "") -> str:
    """One panel drawn for several runs on shared axes, as an inline ``<svg>`` (see :func:`render_panel_svg`).

    ``runs``: ``(label, rows)`` per run, in the order of their colours (tab10: run ``i`` gets colour ``i``, the
    same colour in every panel). Each metric of ``resolved`` that a run logged is one curve of that run's colour;
    the metrics of one panel are told apart by line style (solid, dashed, dotted, dash-dot, in the panel's order).
    A run without a metric simply has no curve for it. Each curve's SVG group has the id
    ``<id_prefix>curve-r<run index>-k<metric index>``, so a page (and a test) can find every run's curve. Meant for
    ``line`` panels (a ``stacked`` one would be drawn as lines too: bars of several runs cannot share a step).
    """
    panel = resolved.panel
    keys = resolved.keys
    fig = _figure(6.0, 3.3)
    ax = fig.subplots()
    run_colors = _colors(max(len(runs), 1))
    styles = ("-", "--", ":", "-.")
    longest = 0
    for r, (label, rows) in enumerate(runs):
        longest = max(longest, len(rows))
        series = collect_series(rows, keys)
        for k, key in enumerate(keys):
            if key not in series:
                continue
            xs, ys, sparse = series[key]
            name = label if len(keys) == 1 else f"{label} {_short_label(key, keys)}"
            line = _plot_curve(ax, xs, ys, sparse, run_colors[r], styles[k % len(styles)], name, panel)
            line.set_gid(f"curve-r{r}-k{k}")
    if panel.annotate:
        ax.margins(y=0.2)
    _decorate(ax, panel, longest)
    return _svg_text(fig, id_prefix)


def _svg_text(fig: Any, id_prefix: str) -> str:
    """``fig`` as an inline ``<svg>`` element, every id and reference prefixed with ``id_prefix``."""
    import matplotlib

    buf = io.StringIO()
    # text as <text> (small, selectable) and a fixed hash salt (the same run gives the same ids: diffable)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "verl-report"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})  # no timestamp: a rebuild gives the same page
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    if id_prefix:
        text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{id_prefix}{m.group(1)}"', text)
        text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{id_prefix}{m.group(1)})", text)
        text = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{id_prefix}{m.group(1)}"', text)
    return text


# ----------------------------------------------------------------------------------------------- entry points
def plot_run(jsonl_path: str, png_path: str, kind: str | None = None, title: str | None = None) -> str | None:
    """Draw the :data:`PANELS` of trainer ``kind`` (guessed from the metric names when None) from ``jsonl_path``
    into ``png_path`` (written atomically). Returns ``png_path``, or None (with a warning) when no panel has data."""
    rows = read_metrics_jsonl(jsonl_path)
    keys = available_keys(rows)
    kind = kind or guess_trainer_kind(keys)
    panels = resolve_panels(kind, keys)
    if not panels:
        logger.warning("plot_run: no %s metric to plot in %s; no plot written", kind, jsonl_path)
        return None
    atomic_write_bytes(png_path, render_panels_png(rows, panels, title))
    return png_path


def plot_metrics(
    jsonl_path: str,
    png_path: str,
    keys: Sequence[str] = ("critic/score/mean", "response_length/mean"),
    title: str | None = None,
) -> str | None:
    """Plot each of ``keys`` against the step, one subplot per key, into ``png_path`` (written atomically).

    A key logged at every step is drawn as a line; a sparse key (logged at fewer steps than the run has, such as
    ``val-core/...`` validation metrics) is drawn as markers with their values. ``null`` (non-finite) values are
    skipped. Keys absent from the file are skipped with a warning; if none is present, nothing is written and None
    is returned. Returns ``png_path`` otherwise. (The trainers use :func:`plot_run`, which draws their panels.)
    """
    rows = read_metrics_jsonl(jsonl_path)
    series = collect_series(rows, keys)
    for key in keys:
        if key not in series:
            logger.warning("plot_metrics: key %r not found in %s; skipping it", key, jsonl_path)
    if not series:
        logger.warning("plot_metrics: none of %s in %s; no plot written", list(keys), jsonl_path)
        return None
    panels = [ResolvedPanel(Panel(key, (key,), annotate=series[key][2]), (key,)) for key in series]
    atomic_write_bytes(png_path, render_panels_png(rows, panels, title))
    return png_path
