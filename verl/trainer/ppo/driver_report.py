"""What the PPO driver tells the user while it runs: :class:`DriverReport`, the part of
:class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer` held as ``trainer.report``.

It holds the run's :class:`~verl.reporting.Tracking` (console, JSONL file, tensorboard, wandb, mlflow, swanlab), the
step hooks every logged row goes to, and the run report (``metrics.png`` with ``trainer.plot``, ``report.html`` and
``samples.jsonl`` with ``trainer.report.*``). It is built from the ``trainer`` section, the run directory and what
the report shows about the run; it is handed the step and batches to report, so it works without a trainer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from verl.protocol import DataProto
from verl.trainer.ppo.batch_rollout import decode_generations

__all__ = ["DriverReport"]


class DriverReport:
    """Tracking, step hooks and the run report of one run.

    ``trainer_cfg``: the ``trainer`` section (:class:`~verl.trainer.config.schema.TrainerConfig` or its DictConfig
    node: ``logger``, ``log_dir``, ``project_name``, ``experiment_name``, ``plot``, ``report``, ``save_freq``,
    ``device``, ``rollout_data_dir``). ``run_dir``: the run's (namespaced) checkpoint directory, where logs and the
    report go; ``namespace`` names an explicit ``log_dir``'s subdirectory. ``run_config``: the whole config,
    recorded by the trackers and the report. ``tokenizer`` decodes the sampled rows; ``about`` is shown in the
    report (``algorithm``, ``actor_dtype``, ``n_ranks``)."""

    def __init__(
        self,
        trainer_cfg: Any,
        run_dir: str,
        namespace: str | None,
        run_config: Mapping[str, Any],
        tokenizer: Any = None,
        about: dict[str, Any] | None = None,
    ) -> None:
        self.trainer_cfg = trainer_cfg
        self.run_dir = run_dir
        self.namespace = namespace
        self.run_config = run_config
        self.tokenizer = tokenizer
        self.about = dict(about or {})
        self.tracker: Any = None  # the current (or last) fit()'s Tracking
        self.step_hooks: list[Callable[[int, dict[str, float]], None]] = []
        self.in_fit = False  # inside fit(), the report follows the step's metrics row, not the save itself
        self._reporter: Any = None

    # ------------------------------------------------------------------------------------------------ tracking
    def make_tracker(self, keep_through_step: int | None = None) -> Any:
        """A :class:`~verl.reporting.Tracking` for this run (``trainer.logger``; logs under ``trainer.log_dir``, in
        the namespace, or ``<run_dir>/logs``); rows after ``keep_through_step`` are dropped from the JSONL file."""
        from omegaconf import OmegaConf

        from verl.reporting import Tracking

        explicit = self.trainer_cfg.log_dir
        config = self.run_config
        if OmegaConf.is_config(config):
            config = OmegaConf.to_container(config, resolve=True)
        return Tracking(
            namespace=self.namespace if explicit else None,
            project_name=self.trainer_cfg.project_name,
            experiment_name=self.trainer_cfg.experiment_name,
            default_backend=list(self.trainer_cfg.logger),
            config=config,
            log_dir=explicit or os.path.join(self.run_dir, "logs"),
            keep_through_step=keep_through_step,
        )

    def begin(self, step: int, resumed: bool, total_steps: int) -> None:
        """The start of a fit(): a new tracker (a resumed run drops the rows of steps after ``step``, which run
        again) and the report started."""
        self.tracker = self.make_tracker(keep_through_step=step if resumed else -1)
        reporter = self.reporter(total_steps)
        if reporter is not None:
            reporter.start(resumed_step=step if resumed else None)

    def log(self, metrics: dict[str, float], step: int) -> None:
        """One row: to the tracker (when a fit() made one) and to every step hook ``hook(step, metrics)``."""
        if self.tracker is not None:
            self.tracker.log(data=metrics, step=step)
        for hook in self.step_hooks:
            hook(step, metrics)

    @property
    def metrics_path(self) -> str | None:
        """The JSONL metrics file of the current (or last) fit(), when the ``file`` logger is on."""
        return getattr(self.tracker, "metrics_path", None)

    def end(self, step: int, stopped_by: str | None = None, error: str | None = None) -> None:
        """The end of a fit(): the tracker closed, the report's final status (finished, stopped, failed)."""
        if self.tracker is not None:
            self.tracker.finish()
        self.in_fit = False
        if self._reporter is not None:
            self._reporter.finish(step, stopped_by=stopped_by, error=error)

    def dump_rollouts(self, batch: DataProto, step: int) -> None:
        """``trainer.rollout_data_dir`` (namespaced): a step's scored rollouts as ``<dir>/<step>.jsonl`` (prompt,
        response, score, extras)."""
        from verl.reporting import dump_rollout_jsonl
        from verl.utils.fs import namespaced_path

        prompts, responses, extra = decode_generations(self.tokenizer, batch)
        scores = batch.batch["token_level_scores"].sum(-1).tolist()
        out_dir = namespaced_path(self.trainer_cfg.rollout_data_dir, self.namespace)
        dump_rollout_jsonl(out_dir, step, prompts, responses, scores, extra)

    # -------------------------------------------------------------------------------------------------- report
    def reporter(self, total_steps: int = 0) -> Any:
        """The run's :class:`~verl.reporting.report.RunReporter`, created on first use (``total_steps`` is shown);
        None when ``trainer.plot`` and ``trainer.report.enable`` are both off."""
        if self._reporter is None:
            from verl.reporting.report import RunReporter, describe_hardware

            cfg = self.trainer_cfg
            plot, report = bool(cfg.plot), bool(cfg.report.enable)
            if not (plot or report):
                return None
            about = self.about
            self._reporter = RunReporter(
                self.run_dir,
                "ppo",
                self.run_config,
                self.metrics_path,
                plot=plot,
                report=report,
                hardware=describe_hardware(
                    str(cfg.device), str(about.get("actor_dtype")), int(about.get("n_ranks", 1))
                ),
                extra={
                    "algorithm": str(about.get("algorithm")),
                    "project": str(cfg.project_name),
                    "experiment": str(cfg.experiment_name),
                    "total_steps": int(total_steps),
                },
            )
        return self._reporter

    def update(self, step: int, status: str | None = None, redraw_plot: bool = True) -> None:
        """Redraw ``metrics.png`` (unless ``redraw_plot`` is False) and rebuild ``report.html`` at ``step`` (no-op
        when both are off); ``status`` None keeps the recorded one. Never raises."""
        reporter = self.reporter()
        if reporter is None:
            return
        reporter.metrics_path = self.metrics_path or reporter.metrics_path
        status = status or str(reporter.info.get("status") or "running")
        reporter.update(step, status, redraw_plot=redraw_plot)

    def sample_step(self, step: int, total_steps: int) -> bool:
        """Whether ``step`` keeps samples: ``trainer.report.sample_steps`` (a list: exactly those; null: the first
        step, every step that saves a checkpoint and the last), when ``trainer.report.num_samples`` > 0."""
        report = self.trainer_cfg.report
        if not report.enable or int(report.num_samples or 0) <= 0:
            return False
        if report.sample_steps is not None:
            return step in {int(s) for s in report.sample_steps}
        save_freq = int(self.trainer_cfg.save_freq)
        return step == 1 or step >= total_steps or (save_freq > 0 and step % save_freq == 0)

    def record_samples(self, batch: DataProto, step: int, total_steps: int) -> None:
        """``trainer.report.num_samples`` rows of a step's scored batch, spread over it (prompt, response, score,
        ground truth, data source, mean advantage), appended to ``samples.jsonl`` for the report."""
        if not self.sample_step(step, total_steps) or self.reporter(total_steps) is None:
            return
        k = min(int(self.trainer_cfg.report.num_samples), len(batch))
        idxs = sorted({i * len(batch) // k for i in range(k)})
        picked = batch.select_idxs(idxs)
        prompts, responses, extra = decode_generations(self.tokenizer, picked)
        scores = picked.batch["token_level_scores"].sum(-1).tolist()
        sources = picked.non_tensor_batch.get("data_source")
        rows = []
        for j in range(len(idxs)):
            row = {"prompt": prompts[j], "response": responses[j], "score": scores[j]}
            row["ground_truth"] = extra["ground_truth"][j] if "ground_truth" in extra else None
            if sources is not None:
                row["data_source"] = str(sources[j])
            if "advantages" in picked.batch.keys():
                mask = picked.batch["response_mask"][j].bool()
                row["advantage"] = float(picked.batch["advantages"][j][mask].mean()) if mask.any() else 0.0
            rows.append(row)
        self._reporter.record_samples(step, rows)
