"""Supervised fine-tuning (prompt-masked cross entropy): ``python -m verl.trainer.main_sft key=value ...``.

The defaults are ``verl/trainer/config/sft_trainer.yaml`` (typed by ``SFTConfig``); e.g.
``python -m verl.trainer.main_sft data.train_files=train.parquet model.path=smollm2-135m-instruct optim.lr=1e-6``.
See docs/offline_trainers.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.offline_schema import SFTConfig


def _load_run() -> Callable[[DictConfig], Any]:
    # Imported only when training: torch and transformers are not needed to print or check a config.
    from verl.trainer.offline.sft import run_sft

    return run_sft


def main(argv: list[str] | None = None) -> int:
    """Run SFT from command-line arguments (``sys.argv[1:]`` when ``argv`` is None); returns the exit code."""
    return run_entrypoint(
        argv,
        prog="python -m verl.trainer.main_sft",
        description="Supervised fine-tuning (prompt-masked cross entropy) (defaults in sft_trainer.yaml).",
        config_name=SFTConfig.config_name,
        schema=SFTConfig,
        load_run_fn=_load_run,
    )


if __name__ == "__main__":
    sys.exit(main())
