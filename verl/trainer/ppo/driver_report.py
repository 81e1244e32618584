"""What the PPO driver tells the user while it runs: metrics to the trackers, the plot, ``report.html`` and its samples.

A part of :class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer`: ``_log`` sends each step's metrics to the one
:class:`~verl.reporting.Tracking` interface (console, JSONL file, tensorboard, wandb, mlflow) and to the step
hooks; :meth:`DriverReportMixin.reporter` builds the run report (``trainer.plot``, ``trainer.report.*``).
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.trainer.ppo.batch_rollout import decode_generations


class DriverReportMixin:
    """Tracking, the step hooks and the run report of the PPO driver."""

    def _log(self, metrics: dict[str, float], step: int) -> None:
        if self._tracker is not None:
            self._tracker.log(data=metrics, step=step)
        for hook in self.step_hooks:
            hook(step, metrics)

    @property
    def metrics_path(self) -> str | None:
        """The JSONL metrics file of the current (or last) ``fit()``, when the ``file`` logger is on."""
        return getattr(self._tracker, "metrics_path", None)

    def _make_tracker(self, keep_through_step: int | None = None):
        from verl.reporting import Tracking

        trainer_cfg = self.config.trainer
        explicit = trainer_cfg.log_dir
        log_dir = explicit or os.path.join(self.checkpoint_dir, "logs")
        return Tracking(
            namespace=self.namespace if explicit else None,
            project_name=trainer_cfg.project_name,
            experiment_name=trainer_cfg.experiment_name,
            default_backend=list(trainer_cfg.logger),
            config=OmegaConf.to_container(self.config, resolve=True),
            log_dir=log_dir,
            keep_through_step=keep_through_step,
        )

    def reporter(self) -> Any:
        """The run's :class:`~verl.reporting.report.RunReporter` (``metrics.png`` with ``trainer.plot``,
        ``report.html`` and ``samples.jsonl`` with ``trainer.report.enable``), created on first use; None when both
        are off."""
        if self._reporter is None:
            from verl.reporting.report import RunReporter, describe_hardware

            trainer_cfg = self.config.trainer
            plot = bool(trainer_cfg.plot)
            report = bool(trainer_cfg.report.enable)
            if not (plot or report):
                return None
            actor_dtype = self.config.actor_rollout_ref.actor.dtype
            self._reporter = RunReporter(
                self.checkpoint_dir,
                "ppo",
                self.config,
                self.metrics_path,
                plot=plot,
                report=report,
                hardware=describe_hardware(str(trainer_cfg.device), str(actor_dtype), self.n_ranks),
                extra={
                    "algorithm": str(self.algorithm.adv_estimator),
                    "project": str(trainer_cfg.project_name),
                    "experiment": str(trainer_cfg.experiment_name),
                    "total_steps": int(self.total_training_steps),
                },
            )
        return self._reporter

    def update_report(self, status: str | None = None, redraw_plot: bool = True) -> None:
        """Redraw ``metrics.png`` (unless ``redraw_plot`` is False) and rebuild ``report.html`` now (no-op when both
        are off); ``status`` None keeps the recorded one (``running`` during fit, the final one after it). Never
        raises."""
        reporter = self.reporter()
        if reporter is None:
            return
        reporter.metrics_path = self.metrics_path or reporter.metrics_path
        status = status or str(reporter.info.get("status") or "running")
        reporter.update(self.global_steps, status, redraw_plot=redraw_plot)

    def _report_sample_step(self, step: int) -> bool:
        """``trainer.report.sample_steps`` (a list: exactly those steps; null: the first step, every step that saves
        a checkpoint and the last step), when ``trainer.report.num_samples`` > 0."""
        report = self.config.trainer.report
        if not report.enable or int(report.num_samples or 0) <= 0:
            return False
        steps = report.sample_steps
        if steps is not None:
            return step in {int(s) for s in steps}
        save_freq = int(self.config.trainer.save_freq)
        return step == 1 or step >= self.total_training_steps or (save_freq > 0 and step % save_freq == 0)

    def _record_report_samples(self, batch: DataProto) -> None:
        """``trainer.report.num_samples`` rows of this step's batch, spread over it (prompt, response, score, ground
        truth, data source), appended to ``samples.jsonl`` for the report."""
        if not self._report_sample_step(self.global_steps) or self.reporter() is None:
            return
        k = min(int(self.config.trainer.report.num_samples), len(batch))
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
        self._reporter.record_samples(self.global_steps, rows)
