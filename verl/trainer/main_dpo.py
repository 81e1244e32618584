"""Direct preference optimisation (sigmoid / ipo / hinge): ``python -m verl.trainer.main_dpo key=value ...``.

The defaults are ``verl/trainer/config/dpo_trainer.yaml`` (typed by ``DPOConfig``); e.g.
``python -m verl.trainer.main_dpo data.train_files=train.parquet model.path=smollm2-135m-instruct optim.lr=1e-6``.
See docs/offline_trainers.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.offline_schema import DPOConfig


def _load_run() -> Callable[[DictConfig], Any]:
    # Imported only when training: torch and transformers are not needed to print or check a config.
    from verl.trainer.offline.dpo import run_dpo

    return run_dpo


def main(argv: list[str] | None = None) -> int:
    """Run DPO from command-line arguments (``sys.argv[1:]`` when ``argv`` is None); returns the exit code."""
    return run_entrypoint(
        argv,
        prog="python -m verl.trainer.main_dpo",
        description="Direct preference optimisation (sigmoid / ipo / hinge) (defaults in dpo_trainer.yaml).",
        config_name=DPOConfig.config_name,
        schema=DPOConfig,
        load_run_fn=_load_run,
    )


if __name__ == "__main__":
    sys.exit(main())
