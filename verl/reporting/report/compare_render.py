"""The page of ``verl compare`` from a :class:`~verl.reporting.report.compare_data.Comparison`.

Built like ``report.html`` (:mod:`verl.reporting.report.render`): the same style sheet and table helpers
(:mod:`verl.reporting.report.html_parts`), inline SVG charts drawn by matplotlib, no script, nothing fetched;
every text from the runs is escaped. Each run has a letter and a colour, the same in every table and chart.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from typing import Any

from verl.reporting.plotting import available_keys, render_overlay_svg, run_colors
from verl.reporting.report.compare_data import MISSING, NO_CONFIG, ComparedRun, Comparison
from verl.reporting.report.html_parts import esc, num, td
from verl.reporting.report.render import PAGE_CSS

logger = logging.getLogger(__name__)

_CSS = """
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: middle;
          margin-right: 5px; }
.status-killed { background: #cf222e; }
td.differs { background: #fff8c5; }
td .absent { color: var(--muted); font-style: italic; }
.gen { margin-bottom: 6px; } .gen:last-child { margin-bottom: 0; }
"""


def _swatch(color: str) -> str:
    return f'<span class="swatch" style="background:{esc(color)}"></span>'


def _run_head(run: ComparedRun, color: str) -> str:
    return f'<th data-run="{esc(run.letter)}">{_swatch(color)}{esc(run.label)}</th>'


def _grid(table_id: str, first: list[str], runs: list[ComparedRun], colors: list[str], rows: list[list[str]]) -> str:
    """A table with the ``first`` column headers, then one column per run (its swatch and label)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in first) + "".join(_run_head(r, c) for r, c in zip(runs, colors))
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# ------------------------------------------------------------------------------------------------- sections
def _runs(cmp: Comparison, colors: list[str]) -> str:
    rows = []
    notes = []
    for run, color in zip(cmp.runs, colors):
        info = run.data.info
        status = run.status
        algorithm = info.get("algorithm")
        kind = run.data.kind + (f" / {algorithm}" if algorithm and algorithm != run.data.kind else "")
        total = info.get("total_steps")
        step = run.last_step
        rows.append(
            [
                f"<td>{_swatch(color)}<b>{esc(run.label)}</b></td>",
                f'<td><span class="badge status-{esc(status)}" data-status="{esc(status)}">{esc(status)}</span></td>',
                td(kind),
                td(f"{step} / {total}" if total else step),
                td(info.get("started_at", "?")),
                td(info.get("updated_at", "?")),
                f"<td><code>{esc(os.path.abspath(run.data.run_dir))}</code></td>",
            ]
        )
        if status == "running":
            notes.append(f"{run.label} is still running: its curves end at its last logged step.")
        elif status == "killed":
            notes.append(f"{run.label} was killed (no clean exit): {info.get('error') or 'its process is gone'}.")
        elif status == "failed":
            notes.append(f"{run.label} failed: {info.get('error')}.")
        elif status == "stopped":
            notes.append(f"{run.label} was stopped early (by {info.get('stopped_by') or '?'}).")
    headers = ["run", "status", "trainer", "step", "started", "last update", "run directory"]
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    table_html = (
        f'<table id="runs"><thead><tr>{head}</tr></thead><tbody>'
        + "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
        + "</tbody></table>"
    )
    note_html = "".join(f"<li>{esc(n)}</li>" for n in notes)
    return (
        f"<header><h1>{len(cmp.runs)} runs compared</h1>"
        '<p class="sub">Each run keeps its letter and colour in every table and chart below.</p>'
        f"{table_html}" + (f'<ul id="run-notes">{note_html}</ul>' if notes else "") + "</header>"
    )


def _problems(cmp: Comparison) -> str:
    if not cmp.problems:
        return ""
    shown = cmp.problems[:30]
    more = len(cmp.problems) - len(shown)
    items = "".join(f"<li>{esc(p)}</li>" for p in shown)
    tail = f"<p>... and {more} more</p>" if more > 0 else ""
    return (
        '<section class="problems" id="problems"><h2>Problems reading these runs</h2>'
        f"<p>These lines were skipped; everything else is shown.</p><ul>{items}</ul>{tail}</section>"
    )


def _config_value(value: Any) -> str:
    if value is MISSING:
        return '<span class="absent">(absent)</span>'
    if value is NO_CONFIG:
        return '<span class="absent">(no config)</span>'
    if value is None:
        return "<code>null</code>"
    plain = isinstance(value, str) and isinstance(_yaml_scalar(value), str)  # "true" the string is shown quoted
    text = value if plain else json.dumps(value, sort_keys=True, default=str)
    return f"<code>{esc(text)}</code>"


def _yaml_scalar(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _same(a: Any, b: Any) -> bool:
    if a is MISSING or b is MISSING or a is NO_CONFIG or b is NO_CONFIG:
        return a is b
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _config(cmp: Comparison, colors: list[str]) -> str:
    missing = ""
    if cmp.config_missing:
        missing = f'<p class="muted">No readable config.yaml: {esc(", ".join(cmp.config_missing))}.</p>'
    if not cmp.config_diff:
        with_config = len(cmp.runs) - len(cmp.config_missing)
        what = "The configs are identical." if with_config >= 2 else "Fewer than two runs have a config to compare."
        return f'<section><h2>Config difference</h2>{missing}<p class="muted" id="config-diff">{what}</p></section>'
    rows = []
    for row in cmp.config_diff:
        cells = [f"<td><code>{esc(row.key)}</code></td>"]
        for i, value in enumerate(row.values):
            differs = i > 0 and not _same(value, row.values[0])
            klass = ' class="differs"' if differs else ""
            cells.append(f"<td{klass}>{_config_value(value)}</td>")
        rows.append(cells)
    note = (
        f"The {len(cmp.config_diff)} keys of <code>config.yaml</code> whose values differ (nested keys flattened); "
        "every other key is the same in all runs. A highlighted value differs from run A's."
    )
    return (
        f'<section><h2>Config difference</h2><p class="sub">{note}</p>{missing}'
        + _grid("config-diff", ["key"], cmp.runs, colors, rows)
        + "</section>"
    )


def _heldout(cmp: Comparison, colors: list[str]) -> str:
    if not cmp.heldout:
        return ""
    rows = []
    for key, per_run in cmp.heldout.items():
        cells = [td(key)]
        for found in per_run:
            cells.append(
                '<td class="num muted">-</td>'
                if found is None
                else f'<td class="num">{num(found[1])} <span class="muted">(step {found[0]})</span></td>'
            )
        rows.append(cells)
    return (
        '<section><h2>Held-out results</h2><p class="sub">The last validation value of each run.</p>'
        + _grid("heldout", ["held-out metric"], cmp.runs, colors, rows)
        + "</section>"
    )


def _charts(cmp: Comparison) -> str:
    single = ""
    if cmp.single_run_keys:
        items = "".join(
            f"<li><code>{esc(k)}</code> ({esc(labels[0])})</li>" for k, labels in cmp.single_run_keys.items()
        )
        single = (
            f'<details id="single-run-metrics"><summary>{len(cmp.single_run_keys)} '
            f"metric{'s' if len(cmp.single_run_keys) != 1 else ''} logged by one run only (not drawn)</summary>"
            f"<ul>{items}</ul></details>"
        )
    if not cmp.panels:
        return (
            '<section id="charts"><h2>Curves</h2><p class="muted">No curves: no metric of the report\'s panels '
            f"was logged by two runs (is the <code>file</code> logger on in <code>trainer.logger</code>?).</p>"
            f"{single}</section>"
        )
    runs = [(r.label, r.data.rows) for r in cmp.runs]
    figures = []
    for i, panel in enumerate(cmp.panels, start=1):
        try:
            svg = render_overlay_svg(runs, panel, id_prefix=f"c{i}-")
        except Exception as err:  # noqa: BLE001 - one chart that cannot be drawn must not lose the page
            logger.warning("compare: chart %r could not be drawn: %s", panel.title, err)
            svg = f'<p class="problems">chart could not be drawn: {esc(err)}</p>'
        drawn = [r.letter for r in cmp.runs if set(panel.keys) & set(available_keys(r.data.rows))]
        figures.append(
            f'<figure class="chart" data-panel="{esc(panel.title)}" data-runs="{esc(",".join(drawn))}" '
            f'title="{esc(", ".join(panel.keys))}">{svg}</figure>'
        )
    note = (
        "The report's panels on shared axes, one colour per run; several metrics of one panel are told apart by line "
        "style. Only metrics at least two runs logged are drawn."
    )
    return (
        f'<section id="charts"><h2>Curves</h2><p class="sub">{note}</p>'
        f'<div class="charts">{"".join(figures)}</div>{single}</section>'
    )


def _mean(rows: list[tuple[int, dict[str, Any]]], key: str) -> float | None:
    values = [
        float(m[key]) for _, m in rows if isinstance(m.get(key), (int, float)) and not isinstance(m.get(key), bool)
    ]
    return sum(values) / len(values) if values else None


def _phases(cmp: Comparison, colors: list[str]) -> str:
    if not any(cmp.phases):
        return (
            '<section><h2>Time and throughput</h2><p class="muted" id="phases">No timing metrics logged.</p></section>'
        )
    n = len(cmp.runs)

    def cell(value: float | int | None, extra: str = "") -> str:
        return '<td class="num muted">-</td>' if value is None else f'<td class="num">{num(value)}{extra}</td>'

    rows = [
        [td("steps logged")] + [cell(len({s for s, _ in r.data.rows if s > 0}) or None) for r in cmp.runs],
        [td("mean step time (s)")]
        + [cell(_mean(r.data.rows, "timing_s/step") or _mean(r.data.rows, "perf/time_per_step")) for r in cmp.runs],
        [td("total time (s)")] + [cell(sum(p.total_s for p in ph.values()) if ph else None) for ph in cmp.phases],
        [td("mean throughput (tokens / s / rank)")] + [cell(_mean(r.data.rows, "perf/throughput")) for r in cmp.runs],
    ]
    names: dict[str, float] = {}
    for ph in cmp.phases:
        for name, p in ph.items():
            names[name] = max(names.get(name, 0.0), p.total_s)
    for name in sorted(names, key=lambda k: -names[k]):
        cells = [td(f"phase {name}: mean s")]
        for i in range(n):
            p = cmp.phases[i].get(name)
            bar = (
                f' <span class="bar" style="width:{max(p.share * 80, 1):.0f}px;background:{esc(colors[i])}"></span>'
                f" {100 * p.share:.1f}%"
                if p is not None
                else ""
            )
            cells.append(cell(p.mean_s if p is not None else None, bar))
        rows.append(cells)
    note = (
        "From <code>timing_s/*</code> (<code>perf/time_per_step</code> for the offline trainers) and "
        "<code>perf/throughput</code>; a phase's bar is its share of that run's total time."
    )
    return (
        f'<section><h2>Time and throughput</h2><p class="sub">{note}</p>'
        + _grid("phases", ["measure"], cmp.runs, colors, rows)
        + "</section>"
    )


def _generations(cmp: Comparison, colors: list[str]) -> str:
    without = ""
    if cmp.runs_without_generations:
        without = (
            '<p class="muted" id="no-generations">No validation generations recorded by '
            f"{esc(', '.join(cmp.runs_without_generations))} (<code>trainer.log_val_generations</code> with the "
            "<code>file</code> logger writes them).</p>"
        )
    if not cmp.generations:
        return (
            f'<section><h2>Validation generations</h2>{without}<p class="muted" id="generations">'
            "No validation prompt was generated by two runs.</p></section>"
        )
    truths = any(pair.ground_truth not in (None, "") for pair in cmp.generations)
    rows = []
    for pair in cmp.generations:
        cells = [f"<td><pre>{esc(pair.prompt)}</pre></td>"]
        if truths:
            cells.append(f"<td><pre>{esc(pair.ground_truth)}</pre></td>")
        for found in pair.per_run:
            if found is None:
                cells.append('<td class="muted">-</td>')
                continue
            step, responses, scores = found
            parts = "".join(
                f'<div class="gen"><pre>{esc(r)}</pre><span class="muted">score {num(s)} · step {step}</span></div>'
                for r, s in zip(responses, scores)
            )
            cells.append(f"<td>{parts}</td>")
        rows.append(cells)
    note = (
        f"{len(cmp.generations)} validation prompts generated by at least two runs, matched by the prompt's text; "
        "each run's generation at its latest validation step."
    )
    return (
        f'<section><h2>Validation generations</h2><p class="sub">{note}</p>{without}'
        + _grid("generations", ["prompt", "ground truth"] if truths else ["prompt"], cmp.runs, colors, rows)
        + "</section>"
    )


def render_comparison_html(cmp: Comparison) -> str:
    """The whole comparison page (a string of HTML5, no external resources)."""
    colors = run_colors(len(cmp.runs))
    generated = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    rebuild = "verl compare " + " ".join(r.data.run_dir for r in cmp.runs)
    parts = [
        _runs(cmp, colors),
        _problems(cmp),
        _config(cmp, colors),
        _heldout(cmp, colors),
        _charts(cmp),
        _phases(cmp, colors),
        _generations(cmp, colors),
    ]
    title = " vs ".join(r.name for r in cmp.runs)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} - verl run comparison</title><style>{PAGE_CSS}{_CSS}</style></head>"
        f"<body><main>{''.join(parts)}"
        f"<footer>Generated {esc(generated)} by verl from the files of the run directories; rebuild with "
        f"<code>{esc(rebuild)}</code>.</footer></main></body></html>\n"
    )
