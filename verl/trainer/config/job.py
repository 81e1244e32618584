"""One job of an entry point, once its config is built: print it (``--cfg``), or write its run record, set up its
environment and run the trainer on it. The single-run path and each job of a ``-m`` sweep both come here."""

from __future__ import annotations

import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.hydra_keys import (
    RunSettings,
    first_missing_dir,
    job_environment,
    remove_run_record,
    write_run_record,
)
from verl.trainer.config.loader import BuiltConfig, config_to_yaml
from verl.trainer.config.validation import ConfigError, ConfigWarning

EXIT_OK = 0
EXIT_RUNTIME_ERROR = 1
EXIT_BAD_CONFIG = 2


def print_warnings(prog: str, caught: list[warnings.WarningMessage]) -> None:
    for w in caught:
        if issubclass(w.category, ConfigWarning):
            print(f"{prog}: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def cfg_text(built: BuiltConfig, which: str) -> str:
    """What ``--cfg job|hydra|all`` prints."""
    if which == "job":
        return config_to_yaml(built.cfg)
    hydra = OmegaConf.to_yaml(OmegaConf.create({"hydra": OmegaConf.to_container(built.hydra, resolve=False)}))
    return hydra if which == "hydra" else hydra + config_to_yaml(built.cfg)


def run_one_job(
    prog: str,
    built: BuiltConfig,
    settings: RunSettings,
    overrides: list[str],
    load_run_fn: Callable[[], Callable[[DictConfig], Any]],
) -> int:
    """Write the run's record, set up its environment (logging, env vars, working directory) and run it."""
    from verl.utils.logging_utils import configure_logging

    trainer_cfg = built.cfg.get("trainer") or {}
    # every entry point's config (PPO, SFT, DPO, eval, ...): a trainer section without the key logs as usual
    configure_logging(bool(trainer_cfg.get("enable_debug_mode")), trainer_cfg.get("third_party_log_level"))
    try:
        run_fn = load_run_fn()
    except ImportError as e:
        print(f"{prog}: the trainer is not available in this installation: {e}", file=sys.stderr)
        return EXIT_RUNTIME_ERROR
    home = OmegaConf.select(built.cfg, "trainer.default_local_dir", default=None)
    if settings.chdir and isinstance(home, str) and not os.path.isabs(home):
        # the job runs inside its run directory: keep the checkpoints where the config said, not nested under it
        built.cfg.trainer.default_local_dir = os.path.abspath(home)
    created = first_missing_dir(settings.run_dir)
    try:
        write_run_record(settings, built.cfg, built.hydra, overrides)
    except OSError as e:
        print(f"{prog}: cannot write the run record under hydra.run.dir={settings.run_dir}: {e}", file=sys.stderr)
        return EXIT_RUNTIME_ERROR
    from verl.utils.errors import RunHealthError

    rejected: ConfigError | None = None
    with job_environment(settings):
        try:
            result = run_fn(built.cfg)
        except ConfigError as e:  # a problem only the trainer can see (e.g. dataset smaller than one batch)
            rejected = e
        except RunHealthError as e:  # trained nothing, or a reward that cannot teach anything: named, one line
            print(f"{prog}: {type(e).__name__}: {e}", file=sys.stderr)
            return EXIT_RUNTIME_ERROR
    if rejected is not None:
        print(f"{prog}: {rejected}", file=sys.stderr)
        # the trainer refused to start: a directory this call made holds only its record, so it goes too
        remove_run_record(settings, created)
        return EXIT_BAD_CONFIG
    stopped_by = result.get("stopped_by") if isinstance(result, dict) else None
    if stopped_by:  # stopped early by a signal after saving: the shell's code for "ended by that signal"
        return 128 + int(signal.Signals[stopped_by])
    return EXIT_OK
