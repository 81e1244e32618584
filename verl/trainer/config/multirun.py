"""``-m`` / ``--multirun``: run one job per combination of swept values, one after another.

Every job's config is built and validated before the first one starts, so a typo in any combination fails in
seconds rather than after hours of training. Each job gets its own directory, Hydra's
``<hydra.sweep.dir>/<hydra.sweep.subdir>`` (default ``multirun/<date>/<time>/<job number>``), which holds its
``.hydra/`` record and log file and, unless the user set ``trainer.default_local_dir`` themselves, its checkpoints,
logs and metrics (``trainer.default_local_dir`` is set to the job's directory: two jobs of one sweep share the
experiment name, and must never resume from each other's checkpoints). Two jobs that would still write to the same
``trainer.default_local_dir`` are refused before anything runs.

The sweep goes on when a job fails (its exception is printed), stops when a job was stopped by a signal, and ends
with a summary; the exit code is the first failed job's (0 when all succeeded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.hydra_keys import is_hydra_override, override_key, resolve_in, run_settings
from verl.trainer.config.job import cfg_text, print_warnings, run_one_job
from verl.trainer.config.loader import BuiltConfig, build_config, peek_hydra_section
from verl.trainer.config.sweep import expand, override_dirname, parse_sweep
from verl.trainer.config.validation import ConfigError, ConfigWarning

EXIT_BAD_CONFIG = 2


def wants_multirun(overrides: list[str], config_file: str | None) -> bool:
    """Whether ``hydra.mode=MULTIRUN`` is set on the command line or in the YAML (Hydra 1.2+'s other spelling of
    ``-m``)."""
    for text in overrides:
        if override_key(text) == "hydra.mode":
            return text.split("=", 1)[1].strip().upper() == "MULTIRUN"
    section = peek_hydra_section(config_file)
    return isinstance(section, DictConfig) and str(section.get("mode") or "").upper() == "MULTIRUN"


def plan_jobs(overrides: list[str], config_file: str | None) -> list[list[str]]:
    """Every job's overrides (``hydra.sweeper.params`` of the YAML first); sweeping a ``hydra.*`` key is refused."""
    for text in overrides:
        if is_hydra_override(text) and parse_sweep(text) is not None:
            raise ConfigError(f"override {text!r}: sweeping over Hydra's own configuration is not supported")
    section = peek_hydra_section(config_file)
    params = OmegaConf.select(section, "sweeper.params", default=None) if isinstance(section, DictConfig) else None
    yaml_params = {str(k): str(v) for k, v in (params or {}).items()}
    return expand(list(overrides), yaml_params)


def _job_dirs(builds: list[BuiltConfig], jobs: list[list[str]]) -> tuple[str, list[str], list[DictConfig]]:
    """The sweep directory (resolved once, as Hydra does), each job's directory and its Hydra node."""
    sweep_dir = str(resolve_in(builds[0].hydra, builds[0].cfg, "sweep.dir"))
    dirs, hydras = [], []
    for num, (built, ovs) in enumerate(zip(builds, jobs, strict=True)):
        hydra = OmegaConf.create(OmegaConf.to_container(built.hydra, resolve=False))
        hydra.mode = "MULTIRUN"
        hydra.job.num = num
        hydra.job.id = str(num)
        conf = hydra.job.config.override_dirname
        task = [t for t in ovs if not is_hydra_override(t)]
        hydra.job.override_dirname = override_dirname(task, conf.kv_sep, conf.item_sep, list(conf.exclude_keys))
        hydra.sweep.dir = sweep_dir
        dirs.append(os.path.join(sweep_dir, str(resolve_in(hydra, built.cfg, "sweep.subdir"))))
        hydras.append(hydra)
    return sweep_dir, dirs, hydras


def build_jobs(
    jobs: list[list[str]], *, name: str, config_file: str | None, config_dir: str | None, schema: type, job_name: str
) -> tuple[str, list[tuple[list[str], BuiltConfig, str]]]:
    """Build and validate every job's config, each with its own directory.

    Raises:
        ConfigError: one line per failing job (``job #N (overrides): problem``), or two jobs sharing a directory.
    """

    def build(ovs: list[str]) -> BuiltConfig:
        return build_config(
            ovs, config_name=name, config_file=config_file, schema=schema, config_dir=config_dir, job_name=job_name
        )

    builds, problems = [], []
    for num, ovs in enumerate(jobs):
        try:
            builds.append(build(ovs))
        except ConfigError as e:
            problems.extend(f"job #{num} ({' '.join(ovs)}): {p}" for p in e.problems)
    if problems:
        raise ConfigError(problems)
    sweep_dir, dirs, hydras = _job_dirs(builds, jobs)
    planned = []
    for ovs, built, job_dir, hydra in zip(jobs, builds, dirs, hydras, strict=True):
        has_home = OmegaConf.select(built.cfg, "trainer.default_local_dir", default=None) is not None
        if has_home and "trainer.default_local_dir" not in built.user_keys:
            built = build([*ovs, f"trainer.default_local_dir={json.dumps(os.path.abspath(job_dir))}"])
        built.hydra = hydra
        planned.append((ovs, built, job_dir))
    homes: dict[str, int] = {}
    for num, (_, built, _) in enumerate(planned):
        home = OmegaConf.select(built.cfg, "trainer.default_local_dir", default=None)
        if home is None:
            continue
        key = os.path.abspath(str(home))
        if key in homes:
            raise ConfigError(
                f"jobs #{homes[key]} and #{num} would both write trainer.default_local_dir={home}: leave it unset "
                "(each job then writes into its own sweep directory) or make it differ per job"
            )
        homes[key] = num
    return sweep_dir, planned


def run_sweep(
    args: argparse.Namespace,
    *,
    prog: str,
    name: str,
    config_file: str | None,
    config_dir: str | None,
    schema: type,
    job_name: str,
    load_run_fn: Callable[[], Callable[[DictConfig], Any]],
) -> int:
    """Plan, validate and run every job of a ``-m`` sweep; returns the exit code (see the module docstring)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        try:
            jobs = plan_jobs(list(args.overrides), config_file)
            sweep_dir, planned = build_jobs(
                jobs, name=name, config_file=config_file, config_dir=config_dir, schema=schema, job_name=job_name
            )
        except ConfigError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return EXIT_BAD_CONFIG
    print_warnings(prog, caught)
    n = len(planned)
    if args.cfg:
        for num, (ovs, built, _) in enumerate(planned):
            sys.stdout.write(f"# job #{num}: {' '.join(ovs)}\n{cfg_text(built, args.cfg)}")
            sys.stdout.write("---\n" if num < n - 1 else "")
        sys.stdout.flush()
        return 0
    print(f"{prog}: multirun: {n} job{'s' if n != 1 else ''} in {sweep_dir}", file=sys.stderr)
    codes: list[int | None] = [None] * n
    swept = [i for i in range(len(planned[0][0])) if len({ovs[i] for ovs, _, _ in planned}) > 1]
    for num, (ovs, built, job_dir) in enumerate(planned):
        shown = " ".join(ovs[i] for i in swept) or "(no overrides)"
        print(f"{prog}: [multirun] job #{num} ({num + 1}/{n}): {shown} -> {job_dir}", file=sys.stderr)
        settings = run_settings(built.hydra, built.cfg, job_dir=job_dir)
        try:
            codes[num] = run_one_job(prog, built, settings, ovs, load_run_fn)
        except Exception:  # noqa: BLE001 - one job's crash must not cost the others; it is printed in full
            traceback.print_exc()
            codes[num] = 1
        if codes[num] >= 128:  # stopped by a signal (after saving): the user wants the sweep to stop too
            break
    print(f"{prog}: multirun summary ({sweep_dir}):", file=sys.stderr)
    for num, ((ovs, _, job_dir), code) in enumerate(zip(planned, codes, strict=True)):
        status = "not run" if code is None else ("ok" if code == 0 else f"failed (exit {code})")
        print(f"  #{num} {status:<16} {' '.join(ovs[i] for i in swept)}  -> {job_dir}", file=sys.stderr)
    failed = [c for c in codes if c]
    done = sum(1 for c in codes if c == 0)
    print(f"{prog}: {done} of {n} jobs succeeded", file=sys.stderr)
    return failed[0] if failed else (0 if done == n else 1)
