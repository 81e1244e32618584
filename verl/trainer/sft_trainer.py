"""Upstream verl v0.9's SFT entry point: ``python -m verl.trainer.sft_trainer key=value ...`` with v0.9's keys.

The defaults are ``verl/trainer/config/sft_trainer_engine.yaml`` (upstream's ``sft_trainer_engine`` with its model,
engine, optim and profiler groups composed in; typed by :class:`SFTEngineConfig`); a v0.9 SFT script runs as it is,
e.g.::

    torchrun --standalone --nnodes=1 --nproc_per_node=8 -m verl.trainer.sft_trainer \\
        data.train_files=$HOME/data/gsm8k/train.parquet data.messages_key=messages \\
        data.micro_batch_size_per_gpu=4 optim.lr=1e-4 engine=fsdp \\
        model.path=Qwen/Qwen2.5-0.5B-Instruct trainer.total_epochs=1

``engine=fsdp`` / ``optim=fsdp`` / ``model=hf_model`` name what this config is; another engine's group
(``engine=megatron``, ``engine=automodel``, ...) is refused in one line. The config is validated in v0.9's layout
(``--cfg job`` prints it), translated onto ``sft_trainer.yaml`` (:mod:`verl.trainer.config.sft_engine_checks`) and
trained by the one SFT trainer (:class:`verl.trainer.offline.sft.SFTTrainer`, as ``main_sft`` and
``fsdp_sft_trainer``). See docs/offline_trainers.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.fsdp_sft_schema import launcher_world_size
from verl.trainer.config.sft_engine_checks import check_world, refuse_engine_group, to_sft_overrides
from verl.trainer.config.sft_engine_schema import SFTEngineConfig
from verl.trainer.config.validation import ConfigError

PROG = "python -m verl.trainer.sft_trainer"


def build_sft_config(cfg: DictConfig) -> DictConfig:
    """The validated ``sft_trainer`` config equivalent to a v0.9 SFT config (``after_each_epoch`` still -1)."""
    from verl.trainer.config.offline_schema import SFTConfig
    from verl.trainer.offline.common import build_offline_config

    return build_offline_config(SFTConfig, to_sft_overrides(cfg))


def _check_rows(cfg: DictConfig) -> None:
    """Rows carrying tool schemas or thinking switches are refused: they would not be rendered."""
    from verl.data.sft_dataset import load_rows

    fields = (str(cfg.data.tools_key), str(cfg.data.enable_thinking_key))
    sft = to_sft_overrides(cfg)  # the data paths with ~ expanded
    for key in ("train_files", "val_files"):
        source = sft[f"data.{key}"]
        if not source:
            continue
        rows = load_rows(source)
        for i, row in enumerate(rows.rows):
            for name in fields:
                if row.get(name) is not None:
                    raise ConfigError(
                        f"{rows.where(i)}: field {name!r} (data.tools_key / data.enable_thinking_key) is set, but "
                        "tool schemas and thinking switches are not rendered into the chat template here; drop the "
                        "column"
                    )


def run_sft_engine(cfg: DictConfig) -> dict[str, float]:
    """Train from a full ``sft_trainer_engine`` config (the CLI's run function); the final metrics."""
    check_world(cfg, launcher_world_size())
    try:
        _check_rows(cfg)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from e
    from verl.trainer.offline.sft import SFTTrainer

    trainer = SFTTrainer.from_config(build_sft_config(cfg))
    per_epoch = None
    updates: dict[str, Any] = {}
    for key in ("save_freq", "test_freq"):
        if cfg.trainer[key] == "after_each_epoch":
            per_epoch = per_epoch or trainer.steps_per_epoch()
            updates[f"trainer.{key}"] = per_epoch
    if updates:
        trainer.update_config(updates)
    return trainer.fit()


def _load_run() -> Callable[[DictConfig], Any]:
    return run_sft_engine


def run_sft_entrypoint(
    argv: list[str] | None, prog: str, description: str, load_run_fn: Callable[[], Callable[[DictConfig], Any]]
) -> int:
    """Parse, validate and run (or print, ``--cfg job``) a v0.9 SFT command line (``sys.argv[1:]`` when ``argv``
    is None) with ``load_run_fn``'s run function; a group of another engine is refused first. The exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args = [a for a in args if not refuse_engine_group(a)]
    except ConfigError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    return run_entrypoint(
        args,
        prog=prog,
        description=description,
        config_name=SFTEngineConfig.config_name,
        schema=SFTEngineConfig,
        load_run_fn=load_run_fn,
    )


def main(argv: list[str] | None = None) -> int:
    """Run v0.9-style SFT from command-line arguments (``sys.argv[1:]`` when ``argv`` is None); the exit code."""
    description = "Supervised fine-tuning with verl v0.9's SFT keys (defaults in sft_trainer_engine.yaml)."
    return run_sft_entrypoint(argv, PROG, description, _load_run)


if __name__ == "__main__":
    sys.exit(main())
