"""``hydra.*`` keys: which overrides are Hydra's, checking their names, and what they do to a run.

A ``hydra.*`` key means the same on the command line (``hydra.run.dir=...``) and in a YAML's ``hydra:`` section;
both go to Hydra's own config node, never to the trainer's schema. Group choices (``hydra/job_logging=disabled``,
``actor@actor_rollout_ref.actor=my_actor``) go to Hydra's composition too. A key Hydra does not know is a one-line
error with the closest names.

What the keys do to a run (``--cfg job`` does none of it, as in Hydra):

* ``hydra.run.dir``: the run's record, ``<dir>/<hydra.output_subdir>/{config,hydra,overrides}.yaml`` (Hydra's
  ``.hydra/``), and the ``<hydra.job.name>.log`` file. Default: ``${trainer.default_local_dir}`` where the config
  has one (the record sits next to the checkpoints, logs and metrics it describes, and a resumed run finds it in
  the same place), else nothing is written unless ``hydra.run.dir`` is set (``main_eval`` writes no directory of its
  own). Hydra's own ``outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}`` is one override away.
* ``hydra.output_subdir`` (``.hydra``; ``null``: no record), ``hydra.job.chdir`` (run inside the run directory),
  ``hydra.job.name`` (the log file's name; default: the entry point's module, e.g. ``main_ppo``),
  ``hydra.job.env_set`` (environment variables of the job), ``hydra.verbose`` (``true``: every logger at DEBUG; a
  name or list: those loggers), ``hydra/job_logging`` (``default``: verl's console plus the log file;
  ``stdout``/``disabled``/``none`` or a custom ``hydra.job_logging`` section: Python's ``logging.config`` as Hydra
  applies it), ``hydra.sweep.dir``/``hydra.sweep.subdir``/``hydra.sweeper.params``/``hydra.mode`` (see sweep.py).
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import logging.config as logging_config
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.validation import ConfigError

HYDRA_DEFAULT_RUN_DIR = "outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}"
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's default job_logging format


def override_key(text: str) -> str:
    """An override's key without its prefix and value (``++hydra.run.dir=x`` -> ``hydra.run.dir``)."""
    return text.lstrip("+~").split("=", 1)[0].strip()


def is_hydra_override(text: str) -> bool:
    """Whether an override belongs to Hydra's own config (``hydra.*``, ``hydra/<group>=...``)."""
    key = override_key(text)
    return key == "hydra" or key.startswith("hydra.") or key.startswith("hydra/")


def is_group_override(text: str, groups: set[str]) -> bool:
    """Whether an override chooses a config group (``group@package=option``, ``a/b=option``, ``+group=option``)
    rather than setting a key: its key has ``@`` or ``/``, or is one word naming a known group."""
    key = override_key(text)
    if "@" in key or "/" in key:
        return True
    return "." not in key and key in groups


@lru_cache(maxsize=1)
def hydra_baseline() -> DictConfig:
    """Hydra's own config node with its defaults (composed once from an empty config)."""
    from hydra import compose, initialize
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="__verl_empty__", node={})
    with initialize(config_path=None, version_base="1.3"):
        return compose("__verl_empty__", return_hydra_config=True).hydra


def unknown_hydra_key(dotted: str, where: str) -> str | None:
    """The error line for a ``hydra.*`` key Hydra does not have (None when it has it, or when it lies under a
    free-form section such as ``hydra.job_logging`` or ``hydra.job.env_set``)."""
    parts = dotted.split(".")
    if parts[0] != "hydra":
        return None
    node: Any = hydra_baseline()
    for i, part in enumerate(parts[1:], start=1):
        if not isinstance(node, DictConfig) or node._is_none() or node._is_missing():
            return None  # a value, or an unset free-form section (hydra.sweeper.params): Hydra decides
        if part in [str(k) for k in node.keys()]:
            node = node._get_node(part)
            continue
        if OmegaConf.get_type(node) is dict:
            return None
        here = ".".join(parts[:i])
        keys = [str(k) for k in node.keys()]
        close = difflib.get_close_matches(part, keys, n=1)
        hint = f"did you mean {here}.{close[0]}?" if close else f"{here} has: {', '.join(keys)}"
        return f"{where}: {dotted}: unknown Hydra key; {hint}"
    return None


def check_hydra_keys(overrides: list[str], yaml_hydra: Any, yaml_file: str | None) -> None:
    """Check every ``hydra.*`` key on the command line and in the primary YAML's ``hydra:`` section.

    Raises:
        ConfigError: one line per unknown key, with a did-you-mean.
    """
    problems = []
    for text in overrides:
        key = override_key(text)
        if key.startswith("hydra."):
            msg = unknown_hydra_key(key, f"override {text!r}")
            if msg:
                problems.append(msg)
    if isinstance(yaml_hydra, DictConfig):
        for key in _dotted(OmegaConf.to_container(yaml_hydra, resolve=False), "hydra"):
            msg = unknown_hydra_key(key, f"config file {yaml_file}")
            if msg:
                problems.append(msg)
    if problems:
        raise ConfigError(problems)
    callbacks = [t for t in overrides if override_key(t).startswith("hydra.callbacks")]
    if callbacks or (isinstance(yaml_hydra, DictConfig) and yaml_hydra.get("callbacks")):
        raise ConfigError("hydra.callbacks: Hydra callbacks are not run by verl's entry points")


def _dotted(node: Any, prefix: str) -> list[str]:
    if isinstance(node, dict) and node:
        return [k for key, v in node.items() for k in _dotted(v, f"{prefix}.{key}")]
    return [prefix]


@dataclass
class RunSettings:
    """What Hydra's node asks of one job, its interpolations resolved against the job's config."""

    run_dir: str | None  # None: no record (no trainer.default_local_dir and no hydra.run.dir)
    output_subdir: str | None
    chdir: bool
    job_name: str
    verbose: Any
    env_set: dict[str, str]
    job_logging: dict[str, Any] | None  # None: verl's default (console + <run_dir>/<job_name>.log)


def resolve_in(hydra: DictConfig, cfg: DictConfig, key: str) -> Any:
    """``hydra.<key>`` resolved with the job's keys (``${trainer.default_local_dir}``) and Hydra's in scope."""
    from hydra.core.utils import setup_globals

    setup_globals()
    root = OmegaConf.create({**OmegaConf.to_container(cfg, resolve=False), "hydra": OmegaConf.to_container(hydra)})
    value = OmegaConf.select(root, f"hydra.{key}", throw_on_missing=False)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def run_settings(hydra: DictConfig, cfg: DictConfig, job_dir: str | None = None) -> RunSettings:
    """The job's :class:`RunSettings`; ``job_dir`` (a multirun job's directory) replaces ``hydra.run.dir``."""
    if job_dir is not None:
        run_dir: str | None = job_dir
    elif OmegaConf.to_container(hydra.run, resolve=False)["dir"] != HYDRA_DEFAULT_RUN_DIR:
        run_dir = str(resolve_in(hydra, cfg, "run.dir"))
    elif OmegaConf.select(cfg, "trainer.default_local_dir", default=None) is not None:
        run_dir = str(cfg.trainer.default_local_dir)
    else:
        run_dir = None
    runtime = OmegaConf.create(OmegaConf.to_container(hydra, resolve=False))
    runtime.runtime.output_dir = os.path.abspath(run_dir) if run_dir else os.getcwd()
    choice = OmegaConf.select(hydra, "runtime.choices.hydra/job_logging")  # Hydra's own config; absent: none
    baseline_logging = OmegaConf.to_container(hydra_baseline().job_logging, resolve=False)
    custom = OmegaConf.to_container(hydra.job_logging, resolve=False) if hydra.job_logging is not None else None
    if choice == "default" and custom == baseline_logging:
        job_logging = None
    else:
        job_logging = resolve_in(runtime, cfg, "job_logging") if custom else {"root": None}
    verbose = OmegaConf.to_container(hydra.verbose) if OmegaConf.is_config(hydra.verbose) else hydra.verbose
    return RunSettings(
        run_dir=run_dir,
        output_subdir=None if hydra.output_subdir is None else str(hydra.output_subdir),
        chdir=bool(hydra.job.chdir),
        job_name=str(hydra.job.name),
        verbose=verbose,
        env_set={str(k): str(v) for k, v in (resolve_in(hydra, cfg, "job.env_set") or {}).items()},
        job_logging=job_logging,
    )


def _atomic_write(path: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a record is as readable as any file the run writes
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_run_record(settings: RunSettings, cfg: DictConfig, hydra: DictConfig, overrides: list[str]) -> str | None:
    """Write Hydra's record of a run: ``config.yaml`` (the resolved job config), ``hydra.yaml`` (Hydra's node) and
    ``overrides.yaml`` (the command line's overrides) under ``<run_dir>/<output_subdir>``; returns that directory."""
    if settings.run_dir is None or settings.output_subdir is None:
        return None
    out = os.path.join(settings.run_dir, settings.output_subdir)
    os.makedirs(out, exist_ok=True)
    record = OmegaConf.create({"hydra": OmegaConf.to_container(hydra, resolve=False)})
    record.hydra.runtime.output_dir = os.path.abspath(settings.run_dir)
    record.hydra.job.name = settings.job_name
    record.hydra.overrides.task = list(overrides)
    _atomic_write(os.path.join(out, "config.yaml"), OmegaConf.to_yaml(cfg, resolve=True))
    _atomic_write(os.path.join(out, "hydra.yaml"), OmegaConf.to_yaml(record))
    _atomic_write(os.path.join(out, "overrides.yaml"), OmegaConf.to_yaml(OmegaConf.create(list(overrides))))
    return out


def first_missing_dir(path: str | None) -> str | None:
    """The outermost directory of ``path`` that does not exist yet (what writing the run's record will create),
    or None when ``path`` is None or exists."""
    if path is None:
        return None
    path = os.path.abspath(path)
    missing = None
    while not os.path.exists(path):
        missing = path
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def remove_run_record(settings: RunSettings, created: str | None) -> None:
    """Undo the record of a run the trainer refused to start (bad data, a config only it can check): remove the
    ``.hydra`` record and the job's log file, then the directories this run created (``created`` and below), but
    only where they are empty: nothing anyone else wrote is touched. A run directory that existed before is left."""
    if settings.run_dir is None or created is None:
        return
    run_dir = os.path.abspath(settings.run_dir)
    if settings.output_subdir is not None:
        record = os.path.join(run_dir, settings.output_subdir)
        for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(record, name))
        with contextlib.suppress(OSError):
            os.rmdir(record)
    with contextlib.suppress(OSError):
        os.remove(os.path.join(run_dir, f"{settings.job_name}.log"))  # new with the directory: this run's own
    path = run_dir
    while True:
        try:
            os.rmdir(path)  # only an empty directory
        except OSError:
            return
        if path == created or os.path.dirname(path) == path:
            return
        path = os.path.dirname(path)


@contextlib.contextmanager
def job_environment(settings: RunSettings) -> Iterator[None]:
    """Run one job as Hydra would: its environment variables, its logging (log file in the run directory), the
    verbose loggers, and the working directory (``hydra.job.chdir``); everything is restored afterwards."""
    saved_env = {k: os.environ.get(k) for k in settings.env_set}
    os.environ.update(settings.env_set)
    root = logging.getLogger()
    handler: logging.Handler | None = None
    if settings.job_logging is None:
        if settings.run_dir is not None:
            os.makedirs(settings.run_dir, exist_ok=True)
            handler = logging.FileHandler(os.path.join(settings.run_dir, f"{settings.job_name}.log"), encoding="utf-8")
            handler.setFormatter(logging.Formatter(LOG_FORMAT))
            root.addHandler(handler)
    elif settings.job_logging.get("root") is not None:
        logging_config.dictConfig(settings.job_logging)
    levels = _set_verbose(settings.verbose)
    old_cwd = os.getcwd()
    if settings.chdir and settings.run_dir is not None:
        os.makedirs(settings.run_dir, exist_ok=True)
        os.chdir(settings.run_dir)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        for name, level in levels.items():
            logging.getLogger(name or None).setLevel(level)
        if handler is not None:
            root.removeHandler(handler)
            handler.close()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _set_verbose(verbose: Any) -> dict[str, int]:
    """Hydra's ``hydra.verbose``: true -> the root logger at DEBUG; a name or a list -> those loggers."""
    if verbose is True:
        names = [""]
    elif isinstance(verbose, str):
        names = [verbose]
    elif isinstance(verbose, list):
        names = [str(n) for n in verbose]
    else:
        return {}
    saved = {}
    for name in names:
        logger = logging.getLogger(name or None)
        saved[name] = logger.level
        logger.setLevel(logging.DEBUG)
    return saved
