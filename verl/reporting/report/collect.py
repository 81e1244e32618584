"""Read a run directory into :class:`RunData`: everything ``report.html`` shows, from files only.

Nothing here needs the training process: ``python -m verl.reporting.report <run_dir>`` rebuilds the report of a run
that is going on, finished or crashed. A file that cannot be read does not stop the report: the problem (file, line,
what is wrong) is listed in :attr:`RunData.problems` and shown at the top of the page.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from verl.reporting.plotting import Rows, available_keys, guess_trainer_kind, read_metrics_jsonl
from verl.reporting.report.run_files import (
    CONFIG_FILE,
    PLOT_FILE,
    RUN_INFO_FILE,
    SAMPLES_FILE,
    STEP_PLAN_FILE,
    reconcile_killed,
)

# time outside timing_s/step (the step's own phases are inside it)
OUTSIDE_STEP = ("timing_s/testing", "timing_s/save_checkpoint")
MAX_SAMPLE_ROWS = 200  # the newest rows of samples.jsonl / val_generations.jsonl that the page shows


@dataclass
class Checkpoint:
    """One ``global_step_N`` directory (or the ``hf_model`` export): its size and whether it is complete."""

    name: str
    step: int | None
    size_bytes: int
    complete: bool
    modified: float


@dataclass
class Phase:
    """One row of the time-per-phase table (seconds from ``timing_s/<name>``)."""

    name: str
    steps: int
    mean_s: float
    total_s: float
    share: float  # of the run's total time: timing_s/step plus the phases outside the step


@dataclass
class RunData:
    """Everything the report shows; built by :func:`collect_run`."""

    run_dir: str
    kind: str
    info: dict[str, Any]
    rows: Rows
    metrics_path: str | None
    config_text: str | None
    samples: list[dict[str, Any]]
    checkpoints: list[Checkpoint]
    hf_export: Checkpoint | None
    latest_step: int | None  # the tracker's step
    problems: list[str] = field(default_factory=list)
    has_plot: bool = False
    step_plan: list[dict[str, Any]] = field(default_factory=list)  # step_plan.json: what one step consumes


def _dir_size(path: str) -> tuple[int, float]:
    total, newest = 0, 0.0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_size
            newest = max(newest, st.st_mtime)
    return total, newest or os.path.getmtime(path)


def find_metrics_file(run_dir: str, info: dict[str, Any]) -> str | None:
    """``run_info.json``'s ``metrics_file`` (relative to the run dir, or absolute), else ``logs/metrics.jsonl``."""
    named = info.get("metrics_file")
    candidates = [named if os.path.isabs(str(named)) else os.path.join(run_dir, str(named))] if named else []
    candidates.append(os.path.join(run_dir, "logs", "metrics.jsonl"))
    for path in candidates:
        if os.path.isfile(path):
            return path
    return None


def _read_jsonl_rows(path: str, split: str, problems: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise TypeError("not a JSON object")
            except (ValueError, TypeError) as e:
                problems.append(f"{path}:{lineno}: not a sample record: {e}")
                continue
            rows.append({"split": split, **row})
    return rows[-MAX_SAMPLE_ROWS:]


def list_checkpoints(run_dir: str) -> tuple[list[Checkpoint], Checkpoint | None, int | None]:
    """The ``global_step_N`` directories under ``run_dir`` (oldest first), the ``hf_model`` export and the tracker's
    step."""
    from verl.checkpoint.layout import get_checkpoint_tracker_filename, is_complete_step_dir, list_step_dirs

    checkpoints = []
    for step, path in list_step_dirs(run_dir):
        size, modified = _dir_size(path)
        checkpoints.append(Checkpoint(os.path.basename(path), step, size, is_complete_step_dir(path), modified))
    hf_dir = os.path.join(run_dir, "hf_model")
    export = None
    if os.path.isdir(hf_dir):
        size, modified = _dir_size(hf_dir)
        export = Checkpoint("hf_model", None, size, os.path.isfile(os.path.join(hf_dir, "config.json")), modified)
    latest = None
    try:
        with open(get_checkpoint_tracker_filename(run_dir), encoding="utf-8") as f:
            latest = int(f.read().strip())
    except (OSError, ValueError):
        pass
    return checkpoints, export, latest


def _read_step_plan(path: str, problems: list[str]) -> list[dict[str, Any]]:
    """The rows of ``step_plan.json`` (``what``, ``value``, ``how``); none when absent or unreadable (noted)."""
    if not os.path.isfile(path):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
        if not isinstance(rows, list) or not all(isinstance(r, dict) and {"what", "value"} <= set(r) for r in rows):
            raise ValueError("expected a list of {what, value, how} objects")
    except ValueError as e:
        problems.append(f"{path}: unreadable ({e})")
        return []
    return rows


def collect_run(run_dir: str, kind: str | None = None) -> RunData:
    """Read ``run_dir`` (see :mod:`verl.reporting.report.run_files` for its files) into :class:`RunData`.

    ``kind`` overrides the trainer kind recorded in ``run_info.json`` (else guessed from the metric names).
    Raises FileNotFoundError when ``run_dir`` is not a directory or holds nothing of a run.
    """
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    problems: list[str] = []
    info: dict[str, Any] = {}
    info_path = os.path.join(run_dir, RUN_INFO_FILE)
    reconcile_killed(run_dir)  # a "running" run whose process is gone is recorded as killed first
    if os.path.isfile(info_path):
        try:
            with open(info_path, encoding="utf-8") as f:
                info = json.load(f)
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            problems.append(f"{info_path}: unreadable ({e})")
            info = {}
    metrics_path = find_metrics_file(run_dir, info)
    rows = read_metrics_jsonl(metrics_path, problems) if metrics_path else []
    checkpoints, export, latest = list_checkpoints(run_dir)
    if not info and metrics_path is None and not checkpoints:
        raise FileNotFoundError(
            f"{run_dir} is not a run directory: no {RUN_INFO_FILE}, no logs/metrics.jsonl and no global_step_N"
        )
    config_path = os.path.join(run_dir, CONFIG_FILE)
    config_text = None
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            config_text = f.read()
    elif metrics_path and os.path.isfile(os.path.join(os.path.dirname(metrics_path), "config.json")):
        with open(os.path.join(os.path.dirname(metrics_path), "config.json"), encoding="utf-8") as f:
            config_text = f.read()  # the file logger's copy (JSON is YAML too)
    samples: list[dict[str, Any]] = []
    if os.path.isfile(os.path.join(run_dir, SAMPLES_FILE)):
        samples += _read_jsonl_rows(os.path.join(run_dir, SAMPLES_FILE), "train", problems)
    if metrics_path:
        val_path = os.path.join(os.path.dirname(metrics_path), "val_generations.jsonl")
        if os.path.isfile(val_path):
            samples += _read_jsonl_rows(val_path, "validation", problems)
    kind = kind or info.get("kind") or guess_trainer_kind(available_keys(rows))
    return RunData(
        step_plan=_read_step_plan(os.path.join(run_dir, STEP_PLAN_FILE), problems),
        run_dir=run_dir,
        kind=str(kind),
        info=info,
        rows=rows,
        metrics_path=metrics_path,
        config_text=config_text,
        samples=samples,
        checkpoints=checkpoints,
        hf_export=export,
        latest_step=latest,
        problems=problems,
        has_plot=os.path.isfile(os.path.join(run_dir, PLOT_FILE)),
    )


def phase_table(rows: Rows) -> list[Phase]:
    """Mean and total seconds of every ``timing_s/<phase>`` and its share of the run's time.

    The run's time is the sum over steps of ``timing_s/step`` plus the phases outside the step (validation,
    checkpoint saves); ``other`` is the part of ``timing_s/step`` that no phase inside it accounts for. Sorted by
    total time, largest first; empty without ``timing_s/*`` metrics (the offline trainers log
    ``perf/time_per_step`` instead, which makes one ``step`` row).
    """
    per_phase: dict[str, dict[int, float]] = {}
    for step, metrics in rows:
        for key, value in metrics.items():
            if key.startswith("timing_s/") and isinstance(value, (int, float)) and not isinstance(value, bool):
                per_phase.setdefault(key, {})[step] = float(value)
    if not per_phase:
        steps = {s: float(m["perf/time_per_step"]) for s, m in rows if isinstance(m.get("perf/time_per_step"), float)}
        if not steps:
            return []
        per_phase = {"timing_s/step": steps}
    step_times = per_phase.get("timing_s/step", {})
    inner = {k: v for k, v in per_phase.items() if k != "timing_s/step" and k not in OUTSIDE_STEP}
    outside = {k: v for k, v in per_phase.items() if k in OUTSIDE_STEP}
    total = sum(step_times.values()) + sum(sum(v.values()) for v in outside.values())
    if not step_times:  # no step total: the phases themselves are the time
        total = sum(sum(v.values()) for v in per_phase.values())
    table = []
    for key, values in {**inner, **outside}.items():
        t = sum(values.values())
        table.append(Phase(key.removeprefix("timing_s/"), len(values), t / len(values), t, t / total if total else 0))
    if step_times:
        other = {s: st - sum(v.get(s, 0.0) for v in inner.values()) for s, st in step_times.items()}
        t = max(sum(other.values()), 0.0)
        name = "other (in step)" if inner else "step"
        if inner and t > 0:
            table.append(Phase(name, len(other), t / len(other), t, t / total if total else 0))
        elif not inner:
            table.append(Phase(name, len(step_times), t / len(step_times), t, 1.0 if total else 0))
    return sorted(table, key=lambda p: -p.total_s)


def validation_summary(rows: Rows) -> list[tuple[str, int, float, int, float]]:
    """Per ``val-core/*/mean@*`` (PPO) or ``eval/*`` accuracy/loss key: ``(key, first step, first value, last step,
    last value)``, the before-and-after of held-out data."""
    series: dict[str, list[tuple[int, float]]] = {}
    for step, metrics in rows:
        for key, value in metrics.items():
            headline = (key.startswith("val-core/") and "/mean@" in key) or key in (
                "eval/loss",
                "eval/rewards/accuracies",
                "eval/rewards/margins",
            )
            if headline and isinstance(value, (int, float)) and not isinstance(value, bool):
                series.setdefault(key, []).append((step, float(value)))
    return [(k, v[0][0], v[0][1], v[-1][0], v[-1][1]) for k, v in sorted(series.items())]
