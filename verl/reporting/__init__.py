"""Reporting: one ``Tracking.log(metrics, step)`` fans out to console, JSONL file, TensorBoard, W&B, MLflow, SwanLab.

The room of everything that watches a run, behind this one interface:

- :mod:`~verl.reporting.backends`: the backends (``trainer.logger``), one class each;
- :mod:`~verl.reporting.values`: metric values as plain numbers (:func:`to_scalar`);
- :mod:`~verl.reporting.progress`: the tqdm :class:`ProgressBar` fed with the same metrics dict;
- :mod:`~verl.reporting.tables`: verl's W&B / MLflow / SwanLab / trackio table loggers
  (``DapoFilteredRewardTableLogger``, ``ValidationGenerationsLogger``);
- :mod:`~verl.reporting.rollout_dump`: :func:`dump_rollout_jsonl`, the ``trainer.rollout_data_dir`` /
  ``trainer.validation_data_dir`` sample dumps;
- :mod:`~verl.reporting.plotting`: the panels of a run's ``metrics.jsonl`` (``metrics.png``, the report's
  charts);
- :mod:`verl.reporting.report`: the run's ``report.html`` (``verl report RUN_DIR``);
- :mod:`~verl.reporting.prometheus`: the Prometheus exporter (``verl.metrics.MetricsExporter``);
- :mod:`verl.reporting.metric`: reducing metric lists to scalars (verl's ``verl.utils.metric``).

verl's ``verl.utils.tracking`` is this package.

Metric values may be Python ints/floats/bools, 0-d (or one-element) torch tensors, numpy scalars or 0-d arrays.
Non-finite values (NaN, +-inf) are kept as floats for console/TensorBoard/W&B/MLflow/SwanLab; the JSONL file stays
strict JSON, so there they are written as ``null`` and their kind is recorded next to the metrics in
``"nonfinite": {"key": "nan" | "inf" | "-inf"}``.
"""

from __future__ import annotations

import logging
import numbers
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from verl.reporting.backends import (
    BACKENDS,
    ConsoleBackend,
    FileBackend,
    MlflowBackend,
    SwanlabBackend,
    TensorboardBackend,
    WandbBackend,
)
from verl.reporting.progress import ProgressBar
from verl.reporting.rollout_dump import dump_rollout_jsonl
from verl.reporting.tables import DapoFilteredRewardTableLogger, ValidationGenerationsLogger
from verl.reporting.values import config_to_dict, to_scalar, to_scalars
from verl.utils.fs import namespaced_path
from verl.utils.logging_utils import console_write

__all__ = [
    "SUPPORTED_BACKENDS",
    "DapoFilteredRewardTableLogger",
    "ValidationGenerationsLogger",
    "ProgressBar",
    "Tracking",
    "console_write",
    "dump_rollout_jsonl",
    "to_scalar",
]

logger = logging.getLogger(__name__)

SUPPORTED_BACKENDS: tuple[str, ...] = tuple(BACKENDS)


class Tracking:
    """Log a metrics dict per step to several backends at once (verl's ``Tracking``).

    Args:
        project_name: project (W&B / SwanLab project, MLflow experiment).
        experiment_name: run name.
        default_backend: one backend name or a list of them, from :data:`SUPPORTED_BACKENDS`.
        config: the run config (DictConfig, dataclass or dict), stored with the run where the backend allows.
        log_dir: directory for ``metrics.jsonl``, ``tensorboard/``, ``wandb/``, ``mlruns/``, ``swanlog/``
            (default ``outputs/<project>/<experiment>/logs``).
        namespace: if set, everything is written under ``<log_dir>/<namespace>``; metric keys are untouched.
        keep_through_step: the step a run starts after (the resumed step, -1 for a fresh run): rows of later steps
            already in ``metrics.jsonl`` / ``val_generations.jsonl`` are dropped, so no step is logged twice.
            None keeps the files as they are.
        upstream_names: metric name -> the name in upstream's ``VERL_FILE_LOGGER_*`` file
            (:mod:`verl.reporting.upstream_env`); None keeps the names.

    Example::

        tracker = Tracking("verl", "demo", ["console", "file"], log_dir="outputs/logs")
        tracker.log({"critic/score/mean": 0.5}, step=1)
        tracker.finish()
    """

    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        default_backend: str | Sequence[str] = "console",
        config: Any = None,
        log_dir: str | None = None,
        namespace: str | None = None,
        keep_through_step: int | None = None,
        upstream_names: Callable[[str], str] | None = None,
    ) -> None:
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend or [])
        for name in backends:
            if name not in SUPPORTED_BACKENDS:
                raise ValueError(
                    f"unknown logger backend {name!r} in trainer.logger; supported backends: "
                    f"{', '.join(SUPPORTED_BACKENDS)}"
                )
        self.project_name = project_name
        self.experiment_name = experiment_name
        self.namespace = namespace
        base = log_dir if log_dir is not None else os.path.join("outputs", project_name, experiment_name, "logs")
        self.log_dir = namespaced_path(base, namespace)
        config_dict = config_to_dict(config)
        self._keep_through_step = keep_through_step
        self._upstream_names = upstream_names
        self.logger: dict[str, Any] = {}
        self._metrics_path = os.path.join(self.log_dir, "metrics.jsonl") if "file" in backends else None
        try:
            for name in dict.fromkeys(backends):  # de-duplicate, keep order
                self.logger[name] = self._make(name, config_dict)
        except BaseException:
            self.finish()
            raise
        self._finished = False

    def _make(self, name: str, config: dict[str, Any] | None) -> Any:
        if name == "console":
            return ConsoleBackend()
        if name == "file":
            from verl.reporting.upstream_env import UpstreamFileLog, upstream_file_path

            path = upstream_file_path(self.project_name, self.experiment_name)
            mirror = None if path is None else UpstreamFileLog(path, self._keep_through_step, self._upstream_names)
            return FileBackend(self.log_dir, config, self._keep_through_step, upstream_file=mirror)
        if name == "tensorboard":
            return TensorboardBackend(self.log_dir, config)
        if name == "wandb":
            return WandbBackend(self.project_name, self.experiment_name, self.log_dir, config, self.namespace)
        if name == "swanlab":
            return SwanlabBackend(self.project_name, self.experiment_name, self.log_dir, config, self.namespace)
        return MlflowBackend(self.project_name, self.experiment_name, self.log_dir, config, self.namespace)

    @property
    def metrics_path(self) -> str | None:
        """Path of the JSONL metrics file when the ``file`` backend is on (also after ``finish``), else None."""
        return self._metrics_path

    def log(self, data: Mapping[str, Any], step: int, backend: str | Iterable[str] | None = None) -> None:
        """Log ``data`` (metric name -> scalar) at ``step`` to all backends, or only to ``backend`` if given."""
        if not isinstance(step, numbers.Integral):
            raise ValueError(f"Tracking.log: step must be an int, got {type(step).__name__}: {step!r}")
        if self._finished:
            return
        scalars = to_scalars(data)
        names = self.logger.keys() if backend is None else ([backend] if isinstance(backend, str) else backend)
        for name in names:
            if name in self.logger:
                self.logger[name].log(scalars, int(step))

    def log_generations(self, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """Log validation generations as a table (``trainer.log_val_generations``): each row has ``input``,
        ``output`` and ``score``. Console: printed; file: ``val_generations.jsonl``; tensorboard: a markdown text
        table; wandb: a ``wandb.Table``; mlflow: a JSON table artifact; swanlab: one ``swanlab.Text`` per row. All under
        the name ``val/generations``."""
        if not isinstance(step, numbers.Integral):
            raise ValueError(f"Tracking.log_generations: step must be an int, got {type(step).__name__}: {step!r}")
        clean = []
        for i, row in enumerate(rows):
            missing = {"input", "output", "score"} - set(row)
            if missing:
                raise ValueError(f"Tracking.log_generations: row {i} lacks {sorted(missing)}")
            clean.append({"input": str(row["input"]), "output": str(row["output"]), "score": float(row["score"])})
        if not clean or self._finished:
            return
        for backend in self.logger.values():
            backend.log_generations(clean, int(step))

    def finish(self, exit_code: int = 0) -> None:
        """Flush and close every backend, once (a second call does nothing; so do ``log`` calls after it).
        ``exit_code`` goes to W&B (``wandb.finish(exit_code=...)``: non-zero marks the run failed)."""
        if getattr(self, "_finished", False):
            return
        self._finished = True
        for name, backend in self.logger.items():
            try:
                if name == "wandb":
                    backend.finish(exit_code=exit_code)
                else:
                    backend.finish()
            except Exception as e:  # one failing backend must not keep the others open
                logger.warning("closing logger backend %s failed: %s", type(backend).__name__, e)

    def __enter__(self) -> Tracking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
