"""The command line shared by every trainer entry point (``main_ppo``, and the SFT/DPO/KTO mains that follow it).

``prog [--config FILE.yaml] [--config-path DIR --config-name NAME] [--cfg job] key=value ...``: build the config
with :func:`load_config`, print it with ``--cfg job``, otherwise hand it to the trainer's run function. An invalid
config prints the :class:`ConfigError` message on stderr and exits with code 2 (no traceback).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.loader import config_to_yaml, demo_overlay_applies, load_config
from verl.trainer.config.validation import ConfigError, ConfigWarning

EXIT_OK = 0
EXIT_RUNTIME_ERROR = 1
EXIT_BAD_CONFIG = 2


def build_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The argument parser of a trainer entry point (options plus free ``key=value`` overrides)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=(
            "overrides: key=value sets a key (value parsed as YAML), +key=value adds a new key, "
            "++key=value sets or adds, ~key deletes. Example: data.train_batch_size=32 "
            "actor_rollout_ref.rollout.n=8 trainer.logger=[console,file]"
        ),
    )
    parser.add_argument("--config", metavar="FILE.yaml", help="a YAML file merged over the packaged defaults")
    parser.add_argument(
        "--config-path", metavar="DIR", help="Hydra-style: directory of the YAML named by --config-name"
    )
    parser.add_argument(
        "--config-name",
        metavar="NAME",
        help="Hydra-style: with --config-path, the user YAML DIR/NAME.yaml; alone, a packaged config name",
    )
    parser.add_argument(
        "--cfg",
        choices=["job"],
        help="print the resolved, validated config as YAML and exit (nothing is trained)",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def _config_source(args: argparse.Namespace, default_name: str) -> tuple[str, str | None]:
    """``(packaged config name, user YAML path or None)`` from the parsed options."""
    if args.config and args.config_path:
        raise ConfigError("give either --config FILE.yaml or --config-path DIR --config-name NAME, not both")
    if args.config_path:
        if not args.config_name:
            raise ConfigError("--config-path needs --config-name (the YAML file name inside that directory)")
        name = args.config_name if args.config_name.endswith((".yaml", ".yml")) else f"{args.config_name}.yaml"
        return default_name, os.path.join(args.config_path, name)
    return (args.config_name or default_name), args.config


def run_entrypoint(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    config_name: str,
    schema: type,
    load_run_fn: Callable[[], Callable[[DictConfig], Any]],
) -> int:
    """Parse ``argv``, build and validate the config, then print it (``--cfg job``) or run it.

    ``load_run_fn`` imports the trainer lazily, so ``--cfg job`` and config errors never pay for torch.

    Returns:
        The process exit code: 0 on success, 2 for a bad command line or config, 1 when the trainer is missing,
        ``128 + N`` when signal N (SIGTERM, SIGINT) stopped the run after its checkpoint was saved.
    """
    parser = build_parser(prog, description)
    try:
        args = parser.parse_intermixed_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, message already printed)
        return int(e.code) if isinstance(e.code, int) else EXIT_BAD_CONFIG
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        try:
            name, config_file = _config_source(args, config_name)
            cfg = load_config(args.overrides, config_name=name, config_file=config_file, schema=schema)
        except ConfigError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return EXIT_BAD_CONFIG
    for w in caught:
        if issubclass(w.category, ConfigWarning):
            print(f"{prog}: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if args.cfg == "job":
        sys.stdout.write(config_to_yaml(cfg))
        sys.stdout.flush()
        return EXIT_OK
    if demo_overlay_applies(schema, config_file, args.overrides):
        print(
            f"{prog}: no data.train_files given: running the embedded demo "
            f"(verl/trainer/config/{schema.demo_config_name}.yaml over the defaults)",
            file=sys.stderr,
        )
    from verl.utils.logging_utils import configure_logging

    trainer_cfg = cfg.get("trainer") or {}
    configure_logging(bool(trainer_cfg.get("enable_debug_mode", False)), trainer_cfg.get("third_party_log_level"))
    try:
        run_fn = load_run_fn()
    except ImportError as e:
        print(f"{prog}: the trainer is not available in this installation: {e}", file=sys.stderr)
        return EXIT_RUNTIME_ERROR
    try:
        result = run_fn(cfg)
    except ConfigError as e:  # a problem only the trainer can see (e.g. dataset smaller than one batch)
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    stopped_by = result.get("stopped_by") if isinstance(result, dict) else None
    if stopped_by:  # stopped early by a signal after saving: the shell's code for "ended by that signal"
        return 128 + int(signal.Signals[stopped_by])
    return EXIT_OK
