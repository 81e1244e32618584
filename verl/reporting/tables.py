"""verl's table loggers of ``verl.utils.tracking``: tables written to the experiment trackers' active runs.

Both take the ``trainer.logger`` list and write only to the trackers named in it that have a table to show; the
run itself (``wandb.init``, ``mlflow.start_run``, ``swanlab.init``, ``trackio.init``) is the
:class:`~verl.reporting.Tracking` backend's or the caller's:

- :class:`DapoFilteredRewardTableLogger`: per step, how many groups DAPO's dynamic sampling dropped for each reward
  value (``algorithm.filter_groups``), as one W&B table row ``"0:3, 1:2"``;
- :class:`ValidationGenerationsLogger`: validation samples ``[input, output, score]`` as a W&B table, an MLflow
  table artifact, SwanLab texts or trackio traces. ``Tracking.log_generations`` covers the console, file and
  TensorBoard backends.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DapoFilteredRewardTableLogger", "ValidationGenerationsLogger"]

logger = logging.getLogger(__name__)

FILTERED_REWARD_KEY = "training/filter_groups/filtered_reward_counts"
_TABLE_COLUMNS = ["step", "reward_counts"]
_INCREMENTAL_WANDB = (0, 20)  # wandb.Table(log_mode="INCREMENTAL") appeared in wandb 0.20


def _version_tuple(version: str) -> tuple[int, ...]:
    from packaging.version import Version

    return Version(version).release


class DapoFilteredRewardTableLogger:
    """A W&B table with one row per step: the reward value -> count of the groups filtered out that step.

    ``log(loggers, reward_counts, step)`` with ``reward_counts`` a ``{reward value: groups}`` mapping adds the row
    ``[step, "v1:n1, v2:n2"]`` (values ascending, written with ``%g``). With wandb >= 0.20 one incremental table
    receives the rows; older wandb gets a new table holding every row so far at each step. Nothing is written
    without ``"wandb"`` in ``loggers`` or without an active W&B run (other trackers have no use for the table).
    """

    project_name: str | None = None
    experiment_name: str | None = None

    def __init__(self, project_name: str | None = None, experiment_name: str | None = None) -> None:
        self.project_name = project_name
        self.experiment_name = experiment_name
        self._table: Any = None
        self._rows: list[list[Any]] | None = None

    @staticmethod
    def format_counts(reward_counts: Mapping[Any, Any]) -> str:
        """``{1.0: 2, 0.0: 3}`` -> ``"0:3, 1:2"``."""
        counts = {float(value): int(n) for value, n in reward_counts.items()}
        return ", ".join(f"{value:g}:{counts[value]}" for value in sorted(counts))

    def log(self, loggers: Sequence[str], reward_counts: Mapping[Any, Any], step: int) -> None:
        """Add this step's row (see the class docstring)."""
        if "wandb" not in loggers:
            return
        import wandb

        if wandb.run is None:
            return
        text = self.format_counts(reward_counts)
        if self._table is None and self._rows is None:
            if _version_tuple(wandb.__version__) >= _INCREMENTAL_WANDB:
                self._table = wandb.Table(columns=_TABLE_COLUMNS, log_mode="INCREMENTAL")
            else:
                self._rows = []
                logger.warning(
                    "wandb %s has no incremental tables: the filtered-reward table is re-sent whole each "
                    "step (wandb >= 0.20 sends one row)",
                    wandb.__version__,
                )
        if self._table is not None:
            self._table.add_data(step, text)
            table = self._table
        else:
            self._rows.append([step, text])
            table = wandb.Table(columns=_TABLE_COLUMNS, data=[list(row) for row in self._rows])
        wandb.log({FILTERED_REWARD_KEY: table}, step=step)


def _split_sample(sample: Any) -> tuple[str, str, Any]:
    if isinstance(sample, list | tuple) and len(sample) >= 3:
        return str(sample[0]), str(sample[1]), sample[2]
    return str(sample), "", None


class ValidationGenerationsLogger:
    """Validation generations to the trackers of ``trainer.logger`` (``trainer.log_val_generations`` samples).

    ``log(loggers, samples, step)`` with ``samples`` a list of ``[input, output, score]``:

    - ``wandb`` (active run): the table ``val/generations`` with columns ``step``, ``input_i``, ``output_i``,
      ``score_i`` for the i-th sample, one row per call, earlier rows kept (verl's layout);
    - ``mlflow`` (active run): ``val_generations/step_<step>.json``, a table of ``input``, ``output``, ``score``;
    - ``swanlab`` (active run): one ``swanlab.Text`` per sample (input, output and score, captioned
      ``sample <i>``) logged as ``val/generations``;
    - ``trackio``: one ``trackio.Trace`` per sample (the input as the user turn, the output as the assistant turn,
      metadata ``source="validation_generations"``, ``sample_index``, ``score``) logged as ``val/generations``.
    """

    project_name: str | None = None
    experiment_name: str | None = None

    def __init__(self, project_name: str | None = None, experiment_name: str | None = None) -> None:
        self.project_name = project_name
        self.experiment_name = experiment_name
        self._wandb_rows: list[list[Any]] = []

    def log(self, loggers: Sequence[str], samples: Sequence[Any], step: int) -> None:
        """Write ``samples`` of ``step`` to each named tracker that shows generations (see the class docstring)."""
        rows = [_split_sample(s) for s in samples]
        if not rows:
            return
        if "wandb" in loggers:
            self._to_wandb(rows, step)
        if "mlflow" in loggers:
            self._to_mlflow(rows, step)
        if "swanlab" in loggers:
            self._to_swanlab(rows, step)
        if "trackio" in loggers:
            self._to_trackio(rows, step)

    def _to_wandb(self, rows: list[tuple[str, str, Any]], step: int) -> None:
        import wandb

        if wandb.run is None:
            return
        columns = ["step"] + [f"{kind}_{i + 1}" for i in range(len(rows)) for kind in ("input", "output", "score")]
        row = [step] + [cell for sample in rows for cell in sample]
        self._wandb_rows.append(row)
        width = len(columns)
        data = [r[:width] + [None] * (width - len(r)) for r in self._wandb_rows]  # a later step may have more samples
        wandb.log({"val/generations": wandb.Table(columns=columns, data=data)}, step=step)

    @staticmethod
    def _to_mlflow(rows: list[tuple[str, str, Any]], step: int) -> None:
        import mlflow

        if mlflow.active_run() is None:
            return
        table = {"input": [r[0] for r in rows], "output": [r[1] for r in rows], "score": [r[2] for r in rows]}
        mlflow.log_table(table, artifact_file=f"val_generations/step_{step}.json")

    @staticmethod
    def _to_swanlab(rows: list[tuple[str, str, Any]], step: int) -> None:
        import swanlab

        from verl.reporting.backends import swanlab_texts

        # swanlab >= 0.10 has has_run(); older ones return None from get_run() when no run is active
        has_run = getattr(swanlab, "has_run", None)
        if not (has_run() if callable(has_run) else swanlab.get_run() is not None):
            return
        swanlab.log(data={"val/generations": swanlab_texts(swanlab, rows)}, step=step)

    @staticmethod
    def _to_trackio(rows: list[tuple[str, str, Any]], step: int) -> None:
        import trackio

        traces = [
            trackio.Trace(
                messages=[{"role": "user", "content": prompt}, {"role": "assistant", "content": output}],
                metadata={"source": "validation_generations", "sample_index": i, "score": score},
            )
            for i, (prompt, output, score) in enumerate(rows)
        ]
        trackio.log({"val/generations": traces}, step=step)
