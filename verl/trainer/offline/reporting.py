"""What an offline trainer (SFT, DPO, KTO, GKD) tells the user while it runs: the metrics trackers and the run
report (``metrics.png``, ``report.html``), as :mod:`verl.trainer.ppo.driver_report` does for the PPO driver.

A part of :class:`~verl.trainer.offline.base.OfflineTrainer`.
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import OmegaConf


class OfflineReportMixin:
    """The tracker (``trainer.logger``) and the run reporter (``trainer.plot``, ``trainer.report.*``)."""

    def _make_tracker(self, keep_through_step: int | None = None) -> Any:
        """The :class:`~verl.reporting.Tracking` of this run, appending after ``keep_through_step`` on resume."""
        from verl.reporting import Tracking
        from verl.reporting.upstream_env import upstream_sft_name

        tcfg = self.config.trainer
        log_dir = tcfg.log_dir or os.path.join(self.output_root, "logs")
        return Tracking(
            project_name=str(tcfg.project_name),
            experiment_name=str(tcfg.experiment_name),
            default_backend=list(tcfg.logger),
            config=OmegaConf.to_container(self.config, resolve=True),
            log_dir=str(log_dir),
            namespace=tcfg.namespace if tcfg.log_dir else None,
            keep_through_step=keep_through_step,
            upstream_names=upstream_sft_name if tcfg.upstream_log_names else None,
        )

    def _make_reporter(self, tracker: Any) -> Any:
        """The :class:`~verl.reporting.report.RunReporter` of this run (``trainer.plot``: ``metrics.png``,
        ``trainer.report.enable``: ``report.html``), None when both are off."""
        from verl.reporting.report import RunReporter, describe_hardware

        tcfg = self.config.trainer
        plot = bool(tcfg.plot)
        report = bool(tcfg.report.enable)
        if not (plot or report):
            return None
        return RunReporter(
            self.output_root,
            self.algorithm_name(),
            self.config,
            getattr(tracker, "metrics_path", None),
            plot=plot,
            report=report,
            hardware=describe_hardware(str(tcfg.device), str(self.config.model.dtype), self.world_size),
            extra={
                "algorithm": self.algorithm_name(),
                "project": str(tcfg.project_name),
                "experiment": str(tcfg.experiment_name),
                "total_steps": int(self._plan()[1]),
            },
        )
