"""On-policy distillation from a teacher (GKD): ``python -m verl.trainer.main_gkd key=value ...``.

The defaults are ``verl/trainer/config/gkd_trainer.yaml`` (typed by ``GKDConfig``); e.g.
``python -m verl.trainer.main_gkd data.train_files=train.parquet model.path=student_dir
teacher.path=smollm2-135m-instruct gkd.lmbda=1.0``.
See docs/judge_and_distillation.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.offline_schema import GKDConfig


def _load_run() -> Callable[[DictConfig], Any]:
    # Imported only when training: torch and transformers are not needed to print or check a config.
    from verl.trainer.offline.gkd import run_gkd

    return run_gkd


def main(argv: list[str] | None = None) -> int:
    """Run GKD from command-line arguments (``sys.argv[1:]`` when ``argv`` is None); returns the exit code."""
    return run_entrypoint(
        argv,
        prog="python -m verl.trainer.main_gkd",
        description="On-policy distillation from a teacher (GKD) (defaults in gkd_trainer.yaml).",
        config_name=GKDConfig.config_name,
        schema=GKDConfig,
        load_run_fn=_load_run,
    )


if __name__ == "__main__":
    sys.exit(main())
