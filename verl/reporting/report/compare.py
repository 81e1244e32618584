"""``verl compare RUN_DIR RUN_DIR [...] [--output FILE]``: several runs side by side on one offline HTML page.

The page (:mod:`verl.reporting.report.compare_render`) shows the config keys whose values differ, the report's
curves of every run on shared axes, time per phase and throughput side by side, the last held-out values and the
generations of the same validation prompts next to each other; it is built from the run directories' files alone
(:mod:`verl.reporting.report.compare_data`), like ``report.html``, so runs that are still going, were stopped,
failed or were killed compare too (their status is on the page). Also ``python -m verl.reporting.report.compare``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from verl.reporting.report.compare_data import Comparison, collect_comparison
from verl.reporting.report.compare_render import render_comparison_html
from verl.utils.fs import atomic_write_text

__all__ = ["build_comparison", "default_output_name", "main", "write_comparison"]


def default_output_name(run_dirs: list[str]) -> str:
    """``compare-<first>-vs-<second>[-and-N-more].html`` from the run directories' base names (characters other
    than letters, digits, ``.``, ``_`` and ``-`` become ``_``), in the current directory."""
    names = [re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(os.path.normpath(d))) or "run" for d in run_dirs]
    more = f"-and-{len(names) - 2}-more" if len(names) > 2 else ""
    return f"compare-{names[0]}-vs-{names[1]}{more}.html"


def build_comparison(run_dirs: list[str]) -> tuple[Comparison, str]:
    """Read ``run_dirs`` and render their page: ``(comparison, html)``. Raises as :func:`collect_comparison`."""
    comparison = collect_comparison(run_dirs)
    return comparison, render_comparison_html(comparison)


def write_comparison(run_dirs: list[str], output: str | None = None) -> str:
    """Compare ``run_dirs`` and write the page atomically to ``output`` (default :func:`default_output_name`);
    returns the path written."""
    path = output or default_output_name(run_dirs)
    atomic_write_text(path, build_comparison(run_dirs)[1])
    return path


def main(argv: list[str] | None = None) -> int:
    """Write the comparison page of the run directories; print its path.

    Exit codes: 0 written (problems reading a run, such as a malformed metrics line, are listed on stderr and on the
    page), 2 when fewer than two directories are given, one is not a run directory (the one-line error names it and
    what is missing) or the arguments are wrong.
    """
    parser = argparse.ArgumentParser(
        prog="verl compare",
        description="Compare training runs on one offline HTML page: config difference, curves, time, generations.",
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="two or more run directories")
    parser.add_argument(
        "--output",
        "-o",
        default=None,
        help="where to write the page (default ./compare-<first>-vs-<second>.html in the current directory)",
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code) if isinstance(e.code, int) else 2
    if len(args.run_dirs) < 2:
        print(f"verl compare: needs at least two run directories, got {len(args.run_dirs)}", file=sys.stderr)
        return 2
    try:
        comparison, page = build_comparison(args.run_dirs)
    except (FileNotFoundError, ValueError) as e:
        print(f"verl compare: {e}", file=sys.stderr)
        return 2
    for problem in comparison.problems:
        print(f"verl compare: warning: {problem}", file=sys.stderr)
    path = args.output or default_output_name(args.run_dirs)
    atomic_write_text(path, page)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
