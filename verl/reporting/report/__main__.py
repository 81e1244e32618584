"""``python -m verl.reporting.report RUN_DIR [--output PATH] [--kind KIND]``: (re)build a run's report.html."""

from __future__ import annotations

import argparse
import os
import sys

from verl.reporting.plotting import TRAINER_KINDS


def main(argv: list[str] | None = None) -> int:
    """Write ``<run_dir>/report.html`` (or ``--output``) from the run directory's files; print its path.

    Exit codes: 0 written (problems reading the run, such as a malformed metrics line, are listed on stderr and on
    the page), 2 when the directory is not a run directory or the arguments are wrong.
    """
    parser = argparse.ArgumentParser(
        prog="verl report", description="Build report.html of a training run from its run directory's files."
    )
    parser.add_argument("run_dir", help="the run's checkpoint directory (trainer.default_local_dir[/namespace])")
    parser.add_argument("--output", "-o", default=None, help="where to write the page (default RUN_DIR/report.html)")
    parser.add_argument("--kind", choices=TRAINER_KINDS, default=None, help="trainer kind (default: as recorded)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code) if isinstance(e.code, int) else 2
    from verl.reporting.report.collect import collect_run
    from verl.reporting.report.render import render_html
    from verl.reporting.report.run_files import REPORT_FILE
    from verl.utils.fs import atomic_write_text

    try:
        data = collect_run(args.run_dir, args.kind)
    except FileNotFoundError as e:
        print(f"verl report: {e}", file=sys.stderr)
        return 2
    for problem in data.problems:
        print(f"verl report: warning: {problem}", file=sys.stderr)
    path = args.output or os.path.join(args.run_dir, REPORT_FILE)
    atomic_write_text(path, render_html(data))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
