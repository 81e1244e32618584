"""``report.html`` from :class:`~verl.reporting.report.collect.RunData`: one self-contained page.

No network at view time: the charts are inline SVG drawn by matplotlib (the panels of verl/reporting/plotting.py),
the style sheet is inline, there is no script. Every piece of text from the run (prompts, responses, config values,
metric names, paths) goes through :func:`html.escape`.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os

from verl.reporting.plotting import available_keys, render_panel_svg, resolve_panels
from verl.reporting.report.collect import Checkpoint, RunData, phase_table, validation_summary
from verl.reporting.report.html_parts import esc as _e
from verl.reporting.report.html_parts import local_time as _time
from verl.reporting.report.html_parts import num as _num
from verl.reporting.report.html_parts import size_text as _size
from verl.reporting.report.html_parts import table as _table
from verl.reporting.report.html_parts import td as _td
from verl.reporting.report.run_files import PLOT_FILE

logger = logging.getLogger(__name__)

_CSS = """
:root { --fg: #1d232a; --muted: #5b6570; --line: #d9dee3; --bg: #f6f7f9; --accent: #1f6feb; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; padding: 24px; }
main { max-width: 1280px; margin: 0 auto; }
h1 { font-size: 22px; margin: 0 0 4px; word-break: break-all; }
h2 { font-size: 17px; margin: 28px 0 10px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.sub { color: var(--muted); margin: 0 0 12px; }
.badge { display: inline-block; padding: 1px 9px; border-radius: 10px; font-weight: 600; font-size: 12px;
         vertical-align: middle; color: #fff; }
.status-running { background: #1f6feb; } .status-finished { background: #1a7f37; }
.status-stopped { background: #9a6700; } .status-failed { background: #cf222e; }
.status-killed { background: #cf222e; }
.status-unknown { background: #6e7781; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.card .k { color: var(--muted); font-size: 12px; } .card .v { font-size: 16px; font-weight: 600; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 12px; }
figure.chart { margin: 0; background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 6px; }
figure.chart svg { width: 100%; height: auto; display: block; }
table { border-collapse: collapse; background: #fff; width: 100%; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef1f4; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td pre, details pre { margin: 0; white-space: pre-wrap; word-break: break-word; font: 12px/1.4 ui-monospace,
       SFMono-Regular, Menlo, Consolas, monospace; }
td pre { max-height: 16em; overflow: auto; }
details { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
details summary { cursor: pointer; font-weight: 600; }
details pre { max-height: 70vh; overflow: auto; margin-top: 8px; }
.bar { display: inline-block; height: 9px; background: var(--accent); border-radius: 2px; vertical-align: middle; }
.problems { background: #fff1f0; border: 1px solid #ffb3ad; border-radius: 6px; padding: 8px 12px; }
.problems li { font-family: ui-monospace, monospace; font-size: 12px; word-break: break-all; }
.muted { color: var(--muted); }
footer { margin-top: 32px; color: var(--muted); font-size: 12px; }
code { font-family: ui-monospace, monospace; font-size: 12px; }
"""
PAGE_CSS = _CSS  # the style of every report page (the comparison of runs uses it too)


# ------------------------------------------------------------------------------------------------- sections
def _header(data: RunData) -> str:
    info = data.info
    status = str(info.get("status") or "unknown")
    title = info.get("experiment") or os.path.basename(os.path.normpath(data.run_dir))
    algorithm = info.get("algorithm")
    kind = data.kind + (f" / {algorithm}" if algorithm and algorithm != data.kind else "")
    steps = info.get("global_step")
    if steps is None and data.rows:
        steps = max(s for s, _ in data.rows)
    total = info.get("total_steps")
    cards = [
        ("status", f'<span class="badge status-{_e(status)}" id="status">{_e(status)}</span>'),
        ("trainer", _e(kind)),
        ("step", _e(f"{steps} / {total}" if total else steps)),
        ("started", _e(info.get("started_at", "?"))),
        ("last update", _e(info.get("updated_at", "?"))),
    ]
    if info.get("stopped_by"):
        cards.append(("stopped by", _e(info["stopped_by"])))
    if info.get("resumed_from_step"):
        cards.append(("resumed from step", _e(info["resumed_from_step"])))
    hardware = info.get("hardware") or {}
    if hardware:
        where = hardware.get("gpu") or hardware.get("cpu") or hardware.get("device")
        cards.append(("hardware", _e(f"{hardware.get('device', '?')}: {where}; {hardware.get('dtype', '?')}")))
    card_html = "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{v}</div></div>' for k, v in cards
    )
    error = info.get("error")
    error_html = f'<div class="problems" id="error"><b>Run failed:</b> <code>{_e(error)}</code></div>' if error else ""
    return (
        f"<header><h1>{_e(title)}</h1>"
        f'<p class="sub">run directory <code>{_e(os.path.abspath(data.run_dir))}</code></p>'
        f'<div class="cards">{card_html}</div>{error_html}</header>'
    )


def _problems(data: RunData) -> str:
    if not data.problems:
        return ""
    shown = data.problems[:20]
    more = len(data.problems) - len(shown)
    items = "".join(f"<li>{_e(p)}</li>" for p in shown)
    tail = f"<p>... and {more} more</p>" if more > 0 else ""
    return (
        '<section class="problems" id="problems"><h2>Problems reading this run</h2>'
        f"<p>These lines were skipped; everything else is shown.</p><ul>{items}</ul>{tail}</section>"
    )


def _summary(data: RunData) -> str:
    rows = validation_summary(data.rows)
    if not rows:
        return ""
    body = []
    for key, s0, v0, s1, v1 in rows:
        change = f"{v1 - v0:+.4g}" if s1 != s0 else ""
        body.append(
            [_td(key), _td(s0, True), _td(v0, True), _td(s1, True), _td(v1, True), f'<td class="num">{_e(change)}</td>']
        )
    headers = ["held-out metric", "first step", "value", "last step", "value", "change"]
    return "<section><h2>Held-out results</h2>" + _table(headers, body, "heldout") + "</section>"


def _charts(data: RunData) -> str:
    if not data.rows:
        why = (
            f"no metrics file (add <code>file</code> to <code>trainer.logger</code>); looked for "
            f"<code>{_e(os.path.join(data.run_dir, 'logs', 'metrics.jsonl'))}</code>"
            if data.metrics_path is None
            else f"<code>{_e(data.metrics_path)}</code> holds no metrics yet"
        )
        return f'<section id="charts"><h2>Curves</h2><p class="muted">No curves: {why}.</p></section>'
    try:
        panels = resolve_panels(data.kind, available_keys(data.rows))
    except ValueError as err:
        return f'<section id="charts"><h2>Curves</h2><p class="problems">{_e(err)}</p></section>'
    figures = []
    for i, panel in enumerate(panels, start=1):
        try:
            svg = render_panel_svg(data.rows, panel, id_prefix=f"c{i}-")
        except Exception as err:  # noqa: BLE001 - one chart that cannot be drawn must not lose the page
            logger.warning("report: chart %r could not be drawn: %s", panel.title, err)
            svg = f'<p class="problems">chart could not be drawn: {_e(err)}</p>'
        keys = ", ".join(panel.keys)
        figures.append(f'<figure class="chart" data-panel="{_e(panel.title)}" title="{_e(keys)}">{svg}</figure>')
    png = f' The same panels are in <a href="{PLOT_FILE}">{PLOT_FILE}</a>.' if data.has_plot else ""
    return (
        f'<section id="charts"><h2>Curves</h2><p class="sub">{len(data.rows)} logged rows from '
        f"<code>{_e(data.metrics_path)}</code>.{png}</p>"
        f'<div class="charts">{"".join(figures)}</div></section>'
    )


def _phases(data: RunData) -> str:
    table = phase_table(data.rows)
    if not table:
        return '<section><h2>Time per phase</h2><p class="muted" id="phases">No timing metrics logged.</p></section>'
    body = []
    for p in table:
        bar = f'<span class="bar" style="width:{max(p.share * 120, 1):.0f}px"></span> {100 * p.share:.1f}%'
        body.append([_td(p.name), _td(p.steps, True), _td(p.mean_s, True), _td(p.total_s, True), f"<td>{bar}</td>"])
    note = (
        "Seconds from <code>timing_s/*</code>; the share is of the run's total time (every step's "
        "<code>timing_s/step</code> plus validation and checkpoint saves, which run outside the step)."
    )
    return (
        f'<section><h2>Time per phase</h2><p class="sub">{note}</p>'
        + _table(["phase", "steps", "mean s", "total s", "share of run time"], body, "phases")
        + "</section>"
    )


def _step_plan(data: RunData) -> str:
    if not data.step_plan:
        return ""
    body = [[_td(r["what"]), _td(r["value"], True), _td(r.get("how", ""))] for r in data.step_plan]
    note = "From the config, before the run started; each figure with the keys and arithmetic that made it."
    return (
        f'<section><h2>One step</h2><p class="sub">{note}</p>'
        + _table(["what", "per step", "from"], body, "step-plan")
        + "</section>"
    )


_SAMPLE_COLUMNS = ("prompt", "response", "score", "ground_truth")


def _samples(data: RunData) -> str:
    if not data.samples:
        if data.kind == "ppo":
            hint = (
                "No samples recorded (<code>trainer.report.num_samples</code> is 0, or no sampled step has run yet; "
                "<code>trainer.log_val_generations</code> adds validation generations)."
            )
        else:
            hint = f"The {_e(data.kind)} trainer generates nothing during training: there are no samples to show."
        return f'<section><h2>Samples</h2><p class="muted" id="samples">{hint}</p></section>'
    body = []
    for row in sorted(data.samples, key=lambda r: (int(r.get("step", 0) or 0), str(r.get("split")))):
        prompt = row.get("prompt", row.get("input"))
        response = row.get("response", row.get("output"))
        extra = {
            k: v
            for k, v in row.items()
            if k not in (*_SAMPLE_COLUMNS, "input", "output", "step", "split", "prompt", "response")
        }
        extra_text = ", ".join(f"{k}={_num(v) if isinstance(v, float) else v}" for k, v in extra.items())
        body.append(
            [
                _td(row.get("step"), True),
                _td(row.get("split")),
                f"<td><pre>{_e(prompt)}</pre></td>",
                f"<td><pre>{_e(response)}</pre></td>",
                _td(row.get("score"), True),
                f"<td><pre>{_e(row.get('ground_truth', ''))}</pre></td>",
                f'<td class="muted">{_e(extra_text)}</td>',
            ]
        )
    headers = ["step", "split", "prompt", "response", "score", "ground truth", "more"]
    return (
        f'<section><h2>Samples</h2><p class="sub">{len(data.samples)} generations with their scores '
        "(training batches at the sampled steps; validation generations when logged).</p>"
        + _table(headers, body, "samples")
        + "</section>"
    )


def _checkpoint_row(ckpt: Checkpoint, latest: int | None, run_dir: str) -> list[str]:
    state = "complete" if ckpt.complete else "incomplete"
    if ckpt.step is not None and ckpt.step == latest:
        state += " (latest)"
    path = os.path.join(run_dir, ckpt.name)
    return [
        _td(ckpt.name),
        _td(ckpt.step if ckpt.step is not None else "export", ckpt.step is not None),
        _td(_size(ckpt.size_bytes)),
        _td(state),
        _td(_time(ckpt.modified)),
        f"<td><code>{_e(path)}</code></td>",
    ]


def _checkpoints(data: RunData) -> str:
    rows = [_checkpoint_row(c, data.latest_step, data.run_dir) for c in data.checkpoints]
    if data.hf_export is not None:
        rows.append(_checkpoint_row(data.hf_export, None, data.run_dir))
    if not rows:
        return '<section><h2>Checkpoints</h2><p class="muted" id="checkpoints">No checkpoint saved yet.</p></section>'
    note = (
        "A step directory is complete once its <code>checkpoint_complete.json</code> marker is written; "
        "<code>hf_model</code> is the Hugging Face export (loadable by <code>AutoModelForCausalLM</code>)."
    )
    return (
        f'<section><h2>Checkpoints</h2><p class="sub">{note}</p>'
        + _table(["directory", "step", "size", "state", "written", "path"], rows, "checkpoints")
        + "</section>"
    )


def _hardware(data: RunData) -> str:
    hardware = data.info.get("hardware") or {}
    if not hardware:
        return ""
    rows = [[_td(k), _td(v)] for k, v in hardware.items()]
    return "<section><h2>Hardware</h2>" + _table(["property", "value"], rows, "hardware") + "</section>"


def _config(data: RunData) -> str:
    if not data.config_text:
        return '<section><h2>Config</h2><p class="muted" id="config">No resolved config was written.</p></section>'
    lines = data.config_text.count("\n") + 1
    return (
        '<section><h2>Config</h2><details id="config"><summary>Resolved config (YAML, '
        f"{lines} lines)</summary><pre>{_e(data.config_text)}</pre></details></section>"
    )


def render_html(data: RunData) -> str:
    """The whole page for ``data`` (a string of HTML5, no external resources)."""
    title = data.info.get("experiment") or os.path.basename(os.path.normpath(data.run_dir))
    generated = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    rebuild = f"python -m verl.reporting.report {data.run_dir}"
    parts = [
        _header(data),
        _problems(data),
        _summary(data),
        _charts(data),
        _phases(data),
        _step_plan(data),
        _samples(data),
        _checkpoints(data),
        _hardware(data),
        _config(data),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)} - verl run report</title><style>{_CSS}</style></head>"
        f"<body><main>{''.join(parts)}"
        f"<footer>Generated {_e(generated)} by verl from the files of the run directory; rebuild with "
        f"<code>{_e(rebuild)}</code>.</footer></main></body></html>\n"
    )
