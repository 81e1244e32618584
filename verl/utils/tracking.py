"""Experiment tracking: one ``Tracking.log(metrics, step)`` fans out to console, JSONL file, TensorBoard, W&B, MLflow.

Also here: a tqdm progress bar fed with the same metrics dict, and ``dump_rollout_jsonl`` for
``trainer.rollout_data_dir`` / ``trainer.validation_data_dir`` sample dumps.

Metric values may be Python ints/floats/bools, 0-d (or one-element) torch tensors, numpy scalars or 0-d arrays.
Non-finite values (NaN, +-inf) are kept as floats for console/TensorBoard/W&B/MLflow; the JSONL file stays strict
JSON, so there they are written as ``null`` and their kind is recorded next to the metrics in
``"nonfinite": {"key": "nan" | "inf" | "-inf"}``.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import re
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from verl.utils.fs import atomic_write_text, makedirs, namespaced_path
from verl.utils.logging_utils import console_write

__all__ = [
    "SUPPORTED_BACKENDS",
    "ProgressBar",
    "Tracking",
    "console_write",
    "dump_rollout_jsonl",
    "to_scalar",
]

logger = logging.getLogger(__name__)

SUPPORTED_BACKENDS: tuple[str, ...] = ("console", "file", "tensorboard", "wandb", "mlflow")

# Metrics the console line shows first (when present), with their short labels.
_CONSOLE_KEYS: tuple[tuple[str, str], ...] = (
    ("critic/score/mean", "score"),
    ("critic/rewards/mean", "reward"),
    ("response_length/mean", "resp_len"),
    ("actor/pg_loss", "pg_loss"),
    ("actor/entropy", "entropy"),
    ("actor/ppo_kl", "ppo_kl"),
    ("actor/kl_loss", "kl_loss"),
    ("critic/vf_loss", "vf_loss"),
    ("loss", "loss"),
    ("rewards/margins", "margins"),
    ("rewards/accuracies", "acc"),
    ("perf/throughput", "tok/s"),
    ("timing_s/step", "step_s"),
)


def to_scalar(key: str, value: Any) -> int | float:
    """Convert one metric value to a Python int or float; anything else raises a ValueError naming ``key``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "numel") and hasattr(value, "item"):  # torch tensor
        if value.numel() != 1:
            raise ValueError(f"metric {key!r}: expected a scalar, got a tensor of shape {tuple(value.shape)}")
        item = value.item()
        return int(item) if isinstance(item, (bool, int)) else float(item)
    if hasattr(value, "shape") and hasattr(value, "item"):  # numpy scalar / array
        if getattr(value, "size", 1) != 1:
            raise ValueError(f"metric {key!r}: expected a scalar, got an array of shape {tuple(value.shape)}")
        return to_scalar(key, value.item())
    raise ValueError(
        f"metric {key!r}: expected a number (int, float, 0-d tensor, numpy scalar), got {type(value).__name__}: "
        f"{value!r:.80}"
    )


def _to_scalars(data: Mapping[str, Any]) -> dict[str, int | float]:
    if not isinstance(data, Mapping):
        raise TypeError(f"Tracking.log: data must be a dict of metric name -> number, got {type(data).__name__}")
    out: dict[str, int | float] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ValueError(f"metric names must be strings, got {key!r}")
        out[key] = to_scalar(key, value)
    return out


def _config_to_dict(config: Any) -> dict[str, Any] | None:
    """Turn an OmegaConf config, dataclass or mapping into plain JSON-able containers."""
    if config is None:
        return None
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            try:
                return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
            except Exception:  # unresolved interpolations: keep them as written
                return OmegaConf.to_container(config, resolve=False)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    import dataclasses

    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"Tracking: config must be a DictConfig, dataclass or dict, got {type(config).__name__}")


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def _fmt(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


class _ConsoleBackend:
    """One compact line per step on stdout; the full dict goes to the ``verl.utils.tracking`` logger at DEBUG.

    Lines go above a live progress bar (:func:`verl.utils.logging_utils.console_write`), never into its line; with
    no bar (stderr not a terminal: CI logs, pipes) they are plain lines.
    """

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream

    def log(self, data: dict[str, int | float], step: int) -> None:
        parts = [f"{label} {_fmt(data[key])}" for key, label in _CONSOLE_KEYS if key in data]
        parts += [f"{k} {_fmt(v)}" for k, v in data.items() if k.startswith("val-core/")]
        if not parts:  # no known key: show the first few so the line is never empty
            parts = [f"{k} {_fmt(v)}" for k, v in list(data.items())[:6]]
        console_write(f"step {step} | " + " | ".join(parts), self.stream)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("step %d metrics: %s", step, json.dumps(data, sort_keys=True, default=str))

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        lines = [f"step {step} | {len(rows)} validation generations:"]
        for row in rows:
            one_line = " ".join(str(row["output"]).split())
            lines.append(
                f"  [score {_fmt(float(row['score']))}] {' '.join(str(row['input']).split())!r} -> {one_line!r}"
            )
        console_write("\n".join(lines), self.stream)

    def finish(self) -> None:
        pass


def _drop_rows_after(path: str, step: int) -> int:
    """Rewrite the JSONL file ``path`` (atomically) without the rows whose ``step`` is above ``step``; returns how
    many were dropped. A resumed run redoes those steps, so keeping them would log each of them twice."""
    if not os.path.isfile(path):
        return 0
    kept, dropped = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row_step = json.loads(line).get("step")
            except (json.JSONDecodeError, AttributeError):
                row_step = None  # a torn last line of a killed run: not a row of any step
            if isinstance(row_step, int) and row_step <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
            else:
                dropped += 1
    if dropped:
        atomic_write_text(path, "".join(kept))
        logger.warning("%s: dropped %d rows after step %d (those steps run again)", path, dropped, step)
    return dropped


class _FileBackend:
    """JSONL: one ``{"step": N, "metrics": {...}}`` per line in ``<log_dir>/metrics.jsonl``, flushed every step."""

    def __init__(self, log_dir: str, config: dict[str, Any] | None, keep_through_step: int | None = None) -> None:
        makedirs(log_dir)
        self.path = os.path.join(log_dir, "metrics.jsonl")
        if config is not None:
            atomic_write_text(os.path.join(log_dir, "config.json"), json.dumps(config, indent=2, default=str))
        if keep_through_step is not None:
            for name in ("metrics.jsonl", "val_generations.jsonl"):
                _drop_rows_after(os.path.join(log_dir, name), keep_through_step)
        # Append: a resumed run continues the same file.
        self._f = open(self.path, "a", encoding="utf-8")

    def log(self, data: dict[str, int | float], step: int) -> None:
        metrics: dict[str, int | float | None] = {}
        nonfinite: dict[str, str] = {}
        for k, v in data.items():
            if isinstance(v, float) and not math.isfinite(v):
                metrics[k] = None
                nonfinite[k] = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
            else:
                metrics[k] = v
        record: dict[str, Any] = {"step": step, "metrics": metrics}
        if nonfinite:
            record["nonfinite"] = nonfinite
        self._f.write(json.dumps(record, allow_nan=False) + "\n")
        self._f.flush()

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        """Append one ``{"step", "input", "output", "score"}`` line per row to ``val_generations.jsonl``."""
        path = os.path.join(os.path.dirname(self.path), "val_generations.jsonl")
        with open(path, "a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps({"step": step, **row}, default=str) + "\n")

    def finish(self) -> None:
        if not self._f.closed:
            self._f.close()


class _TensorboardBackend:
    """``torch.utils.tensorboard.SummaryWriter`` writing into ``<log_dir>/tensorboard``."""

    def __init__(self, log_dir: str, config: dict[str, Any] | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.dir = os.path.join(log_dir, "tensorboard")
        makedirs(self.dir)
        self.writer = SummaryWriter(log_dir=self.dir)
        if config is not None:
            self.writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)

    def log(self, data: dict[str, int | float], step: int) -> None:
        for k, v in data.items():
            self.writer.add_scalar(k, v, global_step=step)
        self.writer.flush()

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        """A markdown table under the text tag ``val/generations``."""

        def cell(value: Any) -> str:
            return " ".join(str(value).split()).replace("|", "\\|")

        lines = ["| input | output | score |", "|---|---|---|"]
        lines += [f"| {cell(r['input'])} | {cell(r['output'])} | {_fmt(float(r['score']))} |" for r in rows]
        self.writer.add_text("val/generations", "\n".join(lines), global_step=step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


class _WandbBackend:
    """Weights & Biases; offline (files under ``<log_dir>/wandb``) unless ``WANDB_MODE`` is set."""

    def __init__(
        self, project: str, experiment: str, log_dir: str, config: dict[str, Any] | None, namespace: str | None
    ) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError(
                "trainer.logger includes 'wandb' but the wandb package is not installed: pip install 'verl[wandb]' "
                "or drop 'wandb' from trainer.logger"
            ) from e
        self.wandb = wandb
        makedirs(log_dir)
        kwargs: dict[str, Any] = dict(project=project, name=experiment, config=config, dir=log_dir)
        if namespace:
            kwargs["group"] = namespace
        if not os.environ.get("WANDB_MODE"):
            kwargs["mode"] = "offline"
        self.run = wandb.init(**kwargs)

    def log(self, data: dict[str, int | float], step: int) -> None:
        self.wandb.log(data, step=step)

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        table = self.wandb.Table(columns=["step", "input", "output", "score"])
        for row in rows:
            table.add_data(step, row["input"], row["output"], float(row["score"]))
        self.wandb.log({"val/generations": table}, step=step)

    def finish(self) -> None:
        self.wandb.finish()


_MLFLOW_BAD_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")


class _MlflowBackend:
    """MLflow; a local file store under ``<log_dir>/mlruns`` unless ``MLFLOW_TRACKING_URI`` is set."""

    def __init__(
        self, project: str, experiment: str, log_dir: str, config: dict[str, Any] | None, namespace: str | None
    ) -> None:
        try:
            import mlflow
        except ImportError as e:
            raise ImportError(
                "trainer.logger includes 'mlflow' but the mlflow package is not installed: pip install "
                "'verl[mlflow]' or drop 'mlflow' from trainer.logger"
            ) from e
        self.mlflow = mlflow
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            store = os.path.abspath(os.path.join(log_dir, "mlruns"))
            makedirs(store)
            mlflow.set_tracking_uri("file://" + store)
        mlflow.set_experiment(project)
        tags = {"namespace": namespace} if namespace else None
        self.run = mlflow.start_run(run_name=experiment, tags=tags)
        if config:
            # MLflow caps a param value at 6000 characters and a batch at 100 params.
            params = {k: str(v)[:6000] for k, v in _flatten(config).items()}
            items = list(params.items())
            for i in range(0, len(items), 100):
                mlflow.log_params(dict(items[i : i + 100]))

    def log(self, data: dict[str, int | float], step: int) -> None:
        # MLflow metric names allow only alphanumerics, '_', '-', '.', ' ' and '/'.
        self.mlflow.log_metrics({_MLFLOW_BAD_CHARS.sub("_", k): float(v) for k, v in data.items()}, step=step)

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        self.mlflow.log_table(
            {k: [r[k] for r in rows] for k in ("input", "output", "score")},
            artifact_file=f"val_generations/step_{step}.json",
        )

    def finish(self) -> None:
        self.mlflow.end_run()


class Tracking:
    """Log a metrics dict per step to several backends at once (verl's ``Tracking``).

    Args:
        project_name: project (W&B project, MLflow experiment).
        experiment_name: run name.
        default_backend: one backend name or a list of them, from :data:`SUPPORTED_BACKENDS`.
        config: the run config (DictConfig, dataclass or dict), stored with the run where the backend allows.
        log_dir: directory for ``metrics.jsonl``, ``tensorboard/``, ``wandb/``, ``mlruns/``
            (default ``outputs/<project>/<experiment>/logs``).
        namespace: if set, everything is written under ``<log_dir>/<namespace>``; metric keys are untouched.
        keep_through_step: the step a run starts after (the resumed step, -1 for a fresh run): rows of later steps
            already in ``metrics.jsonl`` / ``val_generations.jsonl`` are dropped, so no step is logged twice.
            None keeps the files as they are.

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
        config_dict = _config_to_dict(config)
        self._keep_through_step = keep_through_step
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
            return _ConsoleBackend()
        if name == "file":
            return _FileBackend(self.log_dir, config, self._keep_through_step)
        if name == "tensorboard":
            return _TensorboardBackend(self.log_dir, config)
        if name == "wandb":
            return _WandbBackend(self.project_name, self.experiment_name, self.log_dir, config, self.namespace)
        return _MlflowBackend(self.project_name, self.experiment_name, self.log_dir, config, self.namespace)

    @property
    def metrics_path(self) -> str | None:
        """Path of the JSONL metrics file when the ``file`` backend is on (also after ``finish``), else None."""
        return self._metrics_path

    def log(self, data: Mapping[str, Any], step: int, backend: str | Iterable[str] | None = None) -> None:
        """Log ``data`` (metric name -> scalar) at ``step`` to all backends, or only to ``backend`` if given."""
        if not isinstance(step, numbers.Integral):
            raise ValueError(f"Tracking.log: step must be an int, got {type(step).__name__}: {step!r}")
        scalars = _to_scalars(data)
        names = self.logger.keys() if backend is None else ([backend] if isinstance(backend, str) else backend)
        for name in names:
            if name in self.logger:
                self.logger[name].log(scalars, int(step))

    def log_generations(self, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """Log validation generations as a table (``trainer.log_val_generations``): each row has ``input``,
        ``output`` and ``score``. Console: printed; file: ``val_generations.jsonl``; tensorboard: a markdown text
        table; wandb: a ``wandb.Table``; mlflow: a JSON table artifact. All under the name ``val/generations``."""
        if not isinstance(step, numbers.Integral):
            raise ValueError(f"Tracking.log_generations: step must be an int, got {type(step).__name__}: {step!r}")
        clean = []
        for i, row in enumerate(rows):
            missing = {"input", "output", "score"} - set(row)
            if missing:
                raise ValueError(f"Tracking.log_generations: row {i} lacks {sorted(missing)}")
            clean.append({"input": str(row["input"]), "output": str(row["output"]), "score": float(row["score"])})
        if not clean:
            return
        for backend in self.logger.values():
            backend.log_generations(clean, int(step))

    def finish(self) -> None:
        """Flush and close every backend (safe to call twice)."""
        for backend in self.logger.values():
            try:
                backend.finish()
            except Exception as e:  # one failing backend must not keep the others open
                logger.warning("closing logger backend %s failed: %s", type(backend).__name__, e)
        self.logger = {}
        self._finished = True

    def __enter__(self) -> Tracking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


def _show_warning_above_bar(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """``warnings.showwarning`` while a :class:`ProgressBar` is shown: the stdlib text, written above the bar."""
    text = warnings.formatwarning(message, category, filename, lineno, line)
    try:
        console_write(text.rstrip("\n"), file if file is not None else sys.stderr)
    except OSError:  # the stdlib ignores a console that cannot be written to
        pass


class ProgressBar:
    """A tqdm bar over training steps showing step/total, ETA, score and tokens/s.

    ``update(metrics, step)`` moves the bar to ``step`` and shows ``critic/score/mean`` and ``perf/throughput``
    from ``metrics`` when present.

    The bar is drawn only when its stream (stderr) is a terminal (``disable=None``, tqdm's rule): CI logs and pipes
    get no carriage returns or escape codes, only the console backend's plain line per step. While the bar is shown,
    everything the run prints goes above it: the console backend's step lines and the trainers' notices through
    :func:`~verl.utils.logging_utils.console_write`, log records through the run's console handlers
    (:class:`~verl.utils.logging_utils.ConsoleHandler`), and Python warnings through ``warnings.showwarning``,
    which the bar routes through ``tqdm.write`` until it closes.
    """

    def __init__(self, total: int, initial: int = 0, desc: str = "Training", disable: bool | None = None) -> None:
        from tqdm.auto import tqdm

        self.total = int(total)
        self.bar = tqdm(total=self.total, initial=int(initial), desc=desc, disable=disable, dynamic_ncols=True)
        self.step = int(initial)
        self._previous_showwarning: Any = None
        if not self.bar.disable and warnings.showwarning is getattr(warnings, "_showwarning_orig", None):
            self._previous_showwarning = warnings.showwarning
            warnings.showwarning = _show_warning_above_bar

    def update(self, metrics: Mapping[str, Any] | None = None, step: int | None = None) -> None:
        """Advance to ``step`` (default: one step further) and refresh the score / throughput fields."""
        target = self.step + 1 if step is None else int(step)
        if target > self.step:
            self.bar.update(target - self.step)
            self.step = target
        postfix: dict[str, str] = {}
        metrics = metrics or {}
        if "critic/score/mean" in metrics:
            postfix["score"] = _fmt(to_scalar("critic/score/mean", metrics["critic/score/mean"]))
        if "perf/throughput" in metrics:
            postfix["tok/s"] = f"{to_scalar('perf/throughput', metrics['perf/throughput']):.1f}"
        if postfix:
            self.bar.set_postfix(postfix, refresh=True)

    @property
    def postfix(self) -> str:
        """The text currently shown after the bar (for tests and logs)."""
        return str(self.bar.postfix or "")

    def close(self) -> None:
        """Close the bar (it stays on screen as the last line) and give ``warnings.showwarning`` back."""
        if self._previous_showwarning is not None and warnings.showwarning is _show_warning_above_bar:
            warnings.showwarning = self._previous_showwarning
        self._previous_showwarning = None
        self.bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _jsonable(key: str, row: int, value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):  # tensors and numpy values
        return _jsonable(key, row, value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _jsonable(key, row, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(key, row, v) for v in value]
    if isinstance(value, numbers.Real):
        return _jsonable(key, row, float(value))
    raise ValueError(f"dump_rollout_jsonl: column {key!r} row {row}: value of type {type(value).__name__} is not JSON")


def dump_rollout_jsonl(
    dump_dir: str,
    step: int,
    prompts: Sequence[str],
    responses: Sequence[str],
    scores: Sequence[float],
    extra: Mapping[str, Sequence[Any]] | None = None,
) -> str:
    """Write one JSON line per sample to ``<dump_dir>/<step>.jsonl`` (atomically) and return the path.

    Each line is ``{"input": prompt, "output": response, "score": score, "step": step, **extra}`` with the column
    names of verl's rollout dumps. All columns must have the same length; non-finite floats become ``null``.
    """
    n = len(prompts)
    columns: dict[str, Sequence[Any]] = {"input": prompts, "output": responses, "score": scores}
    for key, col in (extra or {}).items():
        if key in ("input", "output", "score", "step"):
            raise ValueError(f"dump_rollout_jsonl: extra column {key!r} clashes with a built-in column")
        columns[key] = col
    for key, col in columns.items():
        if len(col) != n:
            raise ValueError(f"dump_rollout_jsonl: column {key!r} has {len(col)} rows, expected {n} (= len(prompts))")
    lines = []
    for i in range(n):
        rec: dict[str, Any] = {}
        for key, col in columns.items():
            rec[key] = _jsonable(key, i, col[i])
            if key == "score":
                rec["step"] = int(step)
        lines.append(json.dumps(rec, ensure_ascii=False, allow_nan=False))
    path = os.path.join(dump_dir, f"{int(step)}.jsonl")
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return path
