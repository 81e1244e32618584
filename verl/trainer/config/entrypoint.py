"""The command line shared by every trainer entry point (``main_ppo``, SFT/DPO/KTO, ``fsdp_sft_trainer``, eval).

``prog [--config FILE.yaml | --config-path DIR --config-name NAME] [--cfg job] [-m] key=value ...``: build the
config with :func:`build_config` (Hydra composition of defaults lists, then this project's layers), print it with
``--cfg job``, otherwise write Hydra's run record and hand the config to the trainer's run function; with ``-m``
run one job per combination of swept values (:mod:`verl.trainer.config.multirun`). An invalid config prints the
:class:`ConfigError` message on stderr and exits with code 2 (no traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.hydra_keys import run_settings
from verl.trainer.config.job import (  # noqa: F401  (cfg_text, run_one_job: importable from here, as before)
    EXIT_BAD_CONFIG,
    EXIT_OK,
    EXIT_RUNTIME_ERROR,
    cfg_text,
    print_warnings,
    run_one_job,
)
from verl.trainer.config.loader import build_config
from verl.trainer.config.multirun import run_sweep, wants_multirun
from verl.trainer.config.validation import ConfigError, ConfigWarning


def build_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The argument parser of a trainer entry point (options plus free ``key=value`` overrides)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=(
            "overrides: key=value sets a key (value parsed as YAML), +key=value adds a new key, "
            "++key=value sets or adds, ~key deletes; group@package=option picks a config group option; "
            "hydra.run.dir=DIR, hydra.job.chdir=true, hydra/job_logging=disabled ... are Hydra's. "
            "Example: data.train_batch_size=32 actor_rollout_ref.rollout.n=8 trainer.logger=[console,file]. "
            "Sweep: -m actor_rollout_ref.actor.optim.lr=1e-6,1e-5 data.seed=range(1,3)"
        ),
    )
    parser.add_argument("--config", metavar="FILE.yaml", help="a YAML file (its defaults: list is composed)")
    parser.add_argument("--config-path", "-cp", metavar="DIR", help="Hydra-style: directory of the primary YAML")
    parser.add_argument(
        "--config-name",
        "-cn",
        metavar="NAME",
        help="Hydra-style: the primary YAML DIR/NAME.yaml; alone (or when DIR has none), a packaged config name",
    )
    parser.add_argument(
        "--cfg",
        choices=["job", "hydra", "all"],
        help="print the resolved, validated config as YAML and exit (job: the trainer's; hydra: Hydra's node)",
    )
    parser.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        help="run one job per combination of the swept values (key=a,b,c, key=range(1,4), key=choice(a,b))",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


_CONFIG_OPTIONS = ("--config", "--config-path", "-cp", "--config-name", "-cn")


def with_default_config(argv: list[str], name: str) -> list[str]:
    """``["--config-name", name]`` when ``argv`` names no config of its own (``--config``, ``--config-path``,
    ``--config-name`` or their short forms), else ``[]``: an entry point whose upstream default config is another
    packaged one (``fully_async_ppo_trainer`` for the fully asynchronous trainer) puts this before its arguments."""
    named = any(arg in _CONFIG_OPTIONS or arg.startswith(tuple(f"{o}=" for o in _CONFIG_OPTIONS)) for arg in argv)
    return [] if named else ["--config-name", name]


def config_source(args: argparse.Namespace, default_name: str) -> tuple[str, str | None, str | None]:
    """``(packaged config name, user YAML path or None, user config directory or None)`` from the options.

    ``--config-path DIR --config-name NAME`` reads ``DIR/NAME.yaml``; when DIR has no such file and NAME is a
    packaged config, that config is the primary with DIR on the search path (for its config groups), as in Hydra.
    A relative DIR that does not exist, with a packaged NAME, is Hydra's "next to the entry module": the packaged
    configs (upstream's scripts say ``--config-path=config --config-name=ppo_trainer``). Config names of engines this
    project lacks (``ppo_megatron_trainer``, ...) are refused in one line.
    """
    from verl.trainer.config.packaged import packaged_config_names
    from verl.trainer.config.upstream_engines import refuse_other_engines

    if args.config and (args.config_path or args.config_name):
        raise ConfigError("give either --config FILE.yaml or --config-path DIR --config-name NAME, not both")
    refuse_other_engines([], args.config_name)  # ppo_megatron_trainer & co: one line naming the engine
    name_stem = (args.config_name or "").removesuffix(".yaml")
    relative_missing = args.config_path and not os.path.isabs(args.config_path) and not os.path.isdir(args.config_path)
    if relative_missing and name_stem in packaged_config_names():
        # Hydra reads a relative --config-path next to the entry module: upstream's `--config-path=config` is its
        # packaged verl/trainer/config, which is ours here
        args.config_path = None
    if args.config_path:
        if not args.config_name:
            raise ConfigError("--config-path needs --config-name (the YAML file name inside that directory)")
        stem = args.config_name[: -len(".yaml")] if args.config_name.endswith(".yaml") else args.config_name
        file_name = args.config_name if args.config_name.endswith((".yaml", ".yml")) else f"{stem}.yaml"
        path = os.path.join(args.config_path, file_name)
        if os.path.isfile(path) or stem not in packaged_config_names():
            return default_name, path, None
        return stem, None, args.config_path
    return (args.config_name or default_name), args.config, None


def _short_name(prog: str) -> str:
    """``python -m verl.trainer.main_ppo`` -> ``main_ppo``: Hydra's default job name (the app's module)."""
    return prog.split()[-1].rsplit(".", 1)[-1]


def run_entrypoint(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    config_name: str,
    schema: type,
    load_run_fn: Callable[[], Callable[[DictConfig], Any]],
) -> int:
    """Parse ``argv``, build and validate the config, then print it (``--cfg job``) or run it (``-m``: each job).

    ``load_run_fn`` imports the trainer lazily, so ``--cfg job`` and config errors never pay for torch. Before the
    trainer starts, Hydra's record of the run (``.hydra/``) is written to ``hydra.run.dir`` (see
    :mod:`verl.trainer.config.hydra_keys`).

    Returns:
        The process exit code: 0 on success, 2 for a bad command line or config, 1 when the trainer is missing (or,
        with ``-m``, when a job failed), ``128 + N`` when signal N (SIGTERM, SIGINT) stopped the run after its
        checkpoint was saved.
    """
    parser = build_parser(prog, description)
    try:
        args = parser.parse_intermixed_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, message already printed)
        return int(e.code) if isinstance(e.code, int) else EXIT_BAD_CONFIG
    job_name = _short_name(prog)
    try:
        name, config_file, config_dir = config_source(args, config_name)
        multirun = args.multirun or wants_multirun(args.overrides, config_file)
    except ConfigError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    if multirun:
        return run_sweep(
            args,
            prog=prog,
            name=name,
            config_file=config_file,
            config_dir=config_dir,
            schema=schema,
            job_name=job_name,
            load_run_fn=load_run_fn,
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        try:
            built = build_config(
                args.overrides,
                config_name=name,
                config_file=config_file,
                schema=schema,
                config_dir=config_dir,
                job_name=job_name,
            )
        except ConfigError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return EXIT_BAD_CONFIG
    print_warnings(prog, caught)
    # what one step consumes (PPO family): on stderr with --cfg job, so stdout stays the YAML of the config
    plan = schema.step_plan_text(built.cfg) if hasattr(schema, "step_plan_text") else None
    if args.cfg:
        if plan:
            print(plan, file=sys.stderr)
        sys.stdout.write(cfg_text(built, args.cfg))
        sys.stdout.flush()
        return EXIT_OK
    if built.demo_applied:
        print(
            f"{prog}: no data.train_files given: running the embedded demo "
            f"(verl/trainer/config/{schema.demo_config_name}.yaml over the defaults)",
            file=sys.stderr,
            flush=True,
        )
    if plan:
        print(plan, flush=True)
    settings = run_settings(built.hydra, built.cfg)
    return run_one_job(prog, built, settings, list(args.overrides), load_run_fn)
