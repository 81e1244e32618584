"""The backends behind :class:`~verl.reporting.Tracking`: console, JSONL file, TensorBoard, W&B, MLflow, SwanLab.

Each backend has ``log(scalars, step)``, ``log_generations(rows, step)`` and ``finish()``; the values it gets are
already plain numbers (:func:`~verl.reporting.values.to_scalar`). Non-finite values (NaN, +-inf) are kept as
floats for console/TensorBoard/W&B/MLflow/SwanLab; the JSONL file stays strict JSON, so there they are written as
``null`` and their kind is recorded next to the metrics in ``"nonfinite": {"key": "nan" | "inf" | "-inf"}``.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from verl.reporting.values import fmt
from verl.utils.fs import atomic_write_text, makedirs
from verl.utils.logging_utils import console_write

__all__ = [
    "BACKENDS",
    "ConsoleBackend",
    "FileBackend",
    "MlflowBackend",
    "SwanlabBackend",
    "TensorboardBackend",
    "WandbBackend",
    "drop_rows_after",
    "swanlab_texts",
]

logger = logging.getLogger(__name__)

# Metrics the console line shows first (when present), with their short labels.
_CONSOLE_KEYS: tuple[tuple[str, str], ...] = (
    ("critic/score/mean", "score"),
    ("distill/task_score/mean", "task_score"),  # with distillation, score mixes in the teacher term; this is the task
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
# share of responses cut at data.max_response_length at or above which the console says so (once per run)
TRUNCATION_HINT_AT = 0.5


def truncation_hint(clip_ratio: float) -> str:
    """The one-line hint shown when ``response_length/clip_ratio`` (the share of a step's responses that hit the
    length limit) is at least :data:`TRUNCATION_HINT_AT`."""
    return (
        f"hint: {100 * clip_ratio:.0f}% of this step's responses stopped at the length limit "
        "(data.max_response_length), so the reward scores unfinished answers; raise data.max_response_length or "
        "ask for shorter answers in the prompt (the 'truncated' figure on each step line follows it)"
    )


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


class ConsoleBackend:
    """One compact line per step on stdout; the full dict goes to the ``verl.reporting.backends`` logger at DEBUG.

    Lines go above a live progress bar (:func:`verl.utils.logging_utils.console_write`), never into its line; with
    no bar (stderr not a terminal: CI logs, pipes) they are plain lines.
    """

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream
        self.hinted_truncation = False

    def log(self, data: dict[str, int | float], step: int) -> None:
        parts = [f"{label} {fmt(data[key])}" for key, label in _CONSOLE_KEYS if key in data]
        clip = data.get("response_length/clip_ratio")
        if clip is not None and math.isfinite(clip):  # the share of responses cut at the length limit
            parts.insert(min(3, len(parts)), f"truncated {100 * clip:.0f}%")
        parts += [f"{k} {fmt(v)}" for k, v in data.items() if k.startswith("val-core/")]
        if not parts:  # no known key: show the first few so the line is never empty
            parts = [f"{k} {fmt(v)}" for k, v in list(data.items())[:6]]
        console_write(f"step {step} | " + " | ".join(parts), self.stream)
        if clip is not None and clip >= TRUNCATION_HINT_AT and not self.hinted_truncation:
            self.hinted_truncation = True
            console_write(truncation_hint(clip), self.stream)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("step %d metrics: %s", step, json.dumps(data, sort_keys=True, default=str))

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        lines = [f"step {step} | {len(rows)} validation generations:"]
        for row in rows:
            one_line = " ".join(str(row["output"]).split())
            lines.append(
                f"  [score {fmt(float(row['score']))}] {' '.join(str(row['input']).split())!r} -> {one_line!r}"
            )
        console_write("\n".join(lines), self.stream)

    def finish(self) -> None:
        pass


def drop_rows_after(path: str, step: int) -> int:
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
        rows = f"{dropped} row{'s' if dropped != 1 else ''}"
        if step < 0:  # a fresh start over the log of an attempt that left no checkpoint
            logger.warning(
                "%s: starting afresh (no checkpoint to resume): removed %s an earlier attempt logged", path, rows
            )
        else:
            logger.warning(
                "%s: removed %s of steps after %d (the run resumes from step %d's checkpoint and runs them again)",
                path,
                rows,
                step,
                step,
            )
    return dropped


class FileBackend:
    """JSONL: one ``{"step": N, "metrics": {...}}`` per line in ``<log_dir>/metrics.jsonl``, flushed every step."""

    def __init__(
        self,
        log_dir: str,
        config: dict[str, Any] | None,
        keep_through_step: int | None = None,
        upstream_file: Any = None,
    ) -> None:
        makedirs(log_dir)
        self.path = os.path.join(log_dir, "metrics.jsonl")
        self.upstream_file = upstream_file  # an UpstreamFileLog (VERL_FILE_LOGGER_*: verl/reporting/upstream_env.py)
        if config is not None:
            atomic_write_text(os.path.join(log_dir, "config.json"), json.dumps(config, indent=2, default=str))
        if keep_through_step is not None:
            for name in ("metrics.jsonl", "val_generations.jsonl"):
                drop_rows_after(os.path.join(log_dir, name), keep_through_step)
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
        if self.upstream_file is not None:
            self.upstream_file.log(data, step)

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        """Append one ``{"step", "input", "output", "score"}`` line per row to ``val_generations.jsonl``."""
        path = os.path.join(os.path.dirname(self.path), "val_generations.jsonl")
        with open(path, "a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps({"step": step, **row}, default=str) + "\n")

    def finish(self) -> None:
        if not self._f.closed:
            self._f.close()
        if self.upstream_file is not None:
            self.upstream_file.close()


class TensorboardBackend:
    """``torch.utils.tensorboard.SummaryWriter`` writing into ``<log_dir>/tensorboard`` (``TENSORBOARD_DIR`` when
    set, as upstream)."""

    def __init__(self, log_dir: str, config: dict[str, Any] | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        from verl.reporting.upstream_env import tensorboard_dir

        self.dir = tensorboard_dir(os.path.join(log_dir, "tensorboard"))
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
        lines += [f"| {cell(r['input'])} | {cell(r['output'])} | {fmt(float(r['score']))} |" for r in rows]
        self.writer.add_text("val/generations", "\n".join(lines), global_step=step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


def _import_backend(name: str) -> Any:
    """The logger package ``name`` (``wandb``, ``mlflow``, ``swanlab``: an optional extra of this project), or one
    ImportError line saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(
            f"trainer.logger includes {name!r} but the {name} package is not installed: pip install 'verl[{name}]' "
            f"or drop {name!r} from trainer.logger"
        ) from e


class WandbBackend:
    """Weights & Biases; offline (files under ``<log_dir>/wandb``) unless ``WANDB_MODE`` is set."""

    def __init__(
        self, project: str, experiment: str, log_dir: str, config: dict[str, Any] | None, namespace: str | None
    ) -> None:
        self.wandb = wandb = _import_backend("wandb")
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

    def finish(self, exit_code: int = 0) -> None:
        self.wandb.finish(exit_code=exit_code)


_MLFLOW_BAD_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")


class MlflowBackend:
    """MLflow; a local file store under ``<log_dir>/mlruns`` unless ``MLFLOW_TRACKING_URI`` is set."""

    def __init__(
        self, project: str, experiment: str, log_dir: str, config: dict[str, Any] | None, namespace: str | None
    ) -> None:
        self.mlflow = mlflow = _import_backend("mlflow")
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


def swanlab_texts(swanlab: Any, samples: Sequence[tuple[Any, Any, Any]]) -> list[Any]:
    """Validation samples ``(input, output, score)`` as SwanLab shows them: one ``swanlab.Text`` each, holding the
    three parts, captioned ``sample <i>``."""
    texts = []
    for i, (prompt, output, score) in enumerate(samples):
        body = f"input: {prompt}\n\n---\n\noutput: {output}\n\n---\n\nscore: {score}"
        texts.append(swanlab.Text(body, caption=f"sample {i}"))
    return texts


# SwanLab modes that talk to the SwanLab cloud; only these log in with SWANLAB_API_KEY ("online" is newer swanlab's
# name for "cloud")
_SWANLAB_CLOUD_MODES = ("cloud", "online")


class SwanlabBackend:
    """SwanLab; offline (files under ``<log_dir>/swanlog``, for ``swanlab sync``) unless ``SWANLAB_MODE`` is set.

    Environment: ``SWANLAB_MODE`` (``cloud``, ``local``, ``offline``, ``disabled``), ``SWANLAB_LOG_DIR`` (instead
    of ``<log_dir>/swanlog``), ``SWANLAB_API_KEY`` (``swanlab.login`` with it before a ``cloud`` run).
    """

    def __init__(
        self, project: str, experiment: str, log_dir: str, config: dict[str, Any] | None, namespace: str | None
    ) -> None:
        self.swanlab = swanlab = _import_backend("swanlab")
        mode = os.environ.get("SWANLAB_MODE") or "offline"
        self.dir = os.environ.get("SWANLAB_LOG_DIR") or os.path.join(log_dir, "swanlog")
        makedirs(self.dir)
        api_key = os.environ.get("SWANLAB_API_KEY")
        if api_key and mode in _SWANLAB_CLOUD_MODES:
            swanlab.login(api_key)
        # experiment_name / logdir / mode "cloud": the names every swanlab since 0.7 accepts (newer ones map them)
        kwargs: dict[str, Any] = dict(
            project=project,
            experiment_name=experiment,
            config={"FRAMEWORK": "verl", **(config or {})},
            logdir=self.dir,
            mode=mode,
        )
        if namespace:
            kwargs["group"] = namespace
        self.run = swanlab.init(**kwargs)

    def log(self, data: dict[str, int | float], step: int) -> None:
        self.swanlab.log(data=data, step=step)

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        """One ``swanlab.Text`` per row (input, output and score in it) under ``val/generations``."""
        texts = swanlab_texts(self.swanlab, [(r["input"], r["output"], r["score"]) for r in rows])
        self.swanlab.log(data={"val/generations": texts}, step=step)

    def finish(self) -> None:
        self.swanlab.finish()


# backend name (``trainer.logger``) -> class, in the order of verl's names
BACKENDS: dict[str, type] = {
    "console": ConsoleBackend,
    "file": FileBackend,
    "tensorboard": TensorboardBackend,
    "wandb": WandbBackend,
    "mlflow": MlflowBackend,
    "swanlab": SwanlabBackend,
}
