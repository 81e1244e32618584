"""A run's ``report.html``: curves, held-out results, time per phase, samples, checkpoints, hardware and config.

The page is built from the files of the run directory alone (:mod:`verl.reporting.report.collect`), so it can be
rebuilt at any time, during the run or long after::

    python -m verl.reporting.report outputs/verl/demo        # or: verl report outputs/verl/demo

The trainers keep it current through :class:`RunReporter` (:mod:`verl.reporting.report.run_files`): at every
checkpoint save and at the end (``trainer.report.enable``; ``trainer.plot`` for ``metrics.png``). The page is
self-contained (inline SVG charts and CSS, no script, nothing fetched) and every text from the run is escaped.

``verl compare RUN_DIR RUN_DIR [...]`` (:mod:`verl.reporting.report.compare`) puts several runs on one such page.
"""

from __future__ import annotations

import os

from verl.reporting.report.collect import RunData, collect_run, phase_table, validation_summary
from verl.reporting.report.render import render_html
from verl.reporting.report.run_files import (
    CONFIG_FILE,
    PLOT_FILE,
    REPORT_FILE,
    RUN_INFO_FILE,
    SAMPLES_FILE,
    RunReporter,
    describe_hardware,
)
from verl.utils.fs import atomic_write_text

__all__ = [
    "CONFIG_FILE",
    "PLOT_FILE",
    "REPORT_FILE",
    "RUN_INFO_FILE",
    "SAMPLES_FILE",
    "RunData",
    "RunReporter",
    "build_report",
    "collect_run",
    "describe_hardware",
    "phase_table",
    "validation_summary",
    "write_report",
]


def build_report(run_dir: str, kind: str | None = None) -> str:
    """The HTML of the report of ``run_dir`` (``kind`` overrides the recorded trainer kind)."""
    return render_html(collect_run(run_dir, kind))


def write_report(run_dir: str, output: str | None = None, kind: str | None = None) -> str:
    """Build the report of ``run_dir`` and write it atomically to ``output`` (default ``<run_dir>/report.html``);
    returns the path written."""
    path = output or os.path.join(run_dir, REPORT_FILE)
    atomic_write_text(path, build_report(run_dir, kind))
    return path
