"""verl's SFT entry point: ``python -m verl.trainer.fsdp_sft_trainer key=value ...`` with verl's keys.

The defaults are ``verl/trainer/config/fsdp_sft_trainer.yaml`` (typed by ``FSDPSFTConfig``); a verl SFT script runs
as it is, e.g.::

    python -m verl.trainer.fsdp_sft_trainer \\
        data.train_files=train.parquet data.prompt_key=extra_info data.response_key=extra_info \\
        data.prompt_dict_keys=[question] +data.response_dict_keys=[answer] \\
        model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct model.lora_rank=32 model.lora_alpha=16 \\
        trainer.default_local_dir=ckpts trainer.total_epochs=1

The config is validated in verl's layout (``--cfg job`` prints it), mapped onto ``sft_trainer.yaml`` and trained by
the one SFT trainer (:class:`verl.trainer.offline.sft.SFTTrainer`, the same as ``main_sft``). Launched by
``torchrun --nproc_per_node=N``, every rank trains its share (FSDP2); ``trainer.nnodes * trainer.n_gpus_per_node``
must then equal torchrun's world size. See docs/offline_trainers.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.fsdp_sft_schema import (
    FSDPSFTConfig,
    expected_world_size,
    launcher_world_size,
    to_sft_overrides,
)
from verl.trainer.config.validation import ConfigError


def check_launch(cfg: DictConfig) -> None:
    """The world size the config asks for must be the one the launcher gave (ConfigError with the fix if not)."""
    want = expected_world_size(cfg)
    have = launcher_world_size()
    if have is None and want > 1:
        raise ConfigError(
            f"trainer.nnodes={cfg.trainer.nnodes} x trainer.n_gpus_per_node={cfg.trainer.n_gpus_per_node} = {want} "
            f"ranks, but this process was not started by a launcher; run `torchrun --nnodes={cfg.trainer.nnodes} "
            f"--nproc_per_node={cfg.trainer.n_gpus_per_node} -m verl.trainer.fsdp_sft_trainer ...`, or set "
            "trainer.n_gpus_per_node=1 trainer.nnodes=1 for one process"
        )
    if have is not None and have != want and want > 1:
        raise ConfigError(
            f"trainer.nnodes x trainer.n_gpus_per_node = {want}, but the launcher started {have} ranks (WORLD_SIZE); "
            "make them agree"
        )
    sp = int(cfg.ulysses_sequence_parallel_size)
    if sp > 1 and (have or 1) % sp != 0:
        raise ConfigError(
            f"ulysses_sequence_parallel_size={sp} does not divide the world size {have or 1} (as verl's device mesh "
            "requires); use a divisor of the number of ranks"
        )


def _check_rows(cfg: DictConfig) -> None:
    """Multi-turn rows carrying tool schemas or thinking switches are refused: they would not be rendered."""
    if not cfg.data.multiturn.enable:
        return
    from verl.data.sft_dataset import load_rows

    fields = (str(cfg.data.multiturn.tools_key), str(cfg.data.multiturn.enable_thinking_key))
    for source in (cfg.data.train_files, cfg.data.val_files):
        if not source:
            continue
        rows = load_rows(source)
        for i, row in enumerate(rows.rows):
            for name in fields:
                if row.get(name) is not None:
                    raise ConfigError(
                        f"{rows.where(i)}: field {name!r} (data.multiturn) is set, but tool schemas and thinking "
                        "switches are not rendered into the chat template here; remove the field"
                    )


def build_sft_config(cfg: DictConfig) -> DictConfig:
    """The validated ``sft_trainer`` config equivalent to a verl SFT config."""
    from verl.trainer.config.offline_schema import SFTConfig
    from verl.trainer.offline.common import build_offline_config

    if not cfg.model.partial_pretrain:
        raise ConfigError("model.partial_pretrain: no model given; set model.partial_pretrain=<model path or hub id>")
    return build_offline_config(SFTConfig, to_sft_overrides(cfg))


def run_fsdp_sft(cfg: DictConfig) -> dict[str, float]:
    """Train from a full ``fsdp_sft_trainer`` config (the CLI's run function)."""
    check_launch(cfg)
    _check_rows(cfg)
    from verl.trainer.offline.sft import run_sft

    return run_sft(build_sft_config(cfg))


def _load_run() -> Callable[[DictConfig], Any]:
    return run_fsdp_sft


def _existing_key_adds_as_sets(argv: list[str]) -> list[str]:
    """``+data.response_dict_keys=[answer]`` -> ``data.response_dict_keys=[answer]`` for keys this config has.

    verl's older SFT config lacked some keys (``response_dict_keys``, the LoRA keys, ...), so its scripts add them
    with ``+``; here they exist, and an add of an existing key would be refused.
    """
    from omegaconf import OmegaConf

    from verl.trainer.config.loader import packaged_config_text

    defaults = OmegaConf.create(packaged_config_text(FSDPSFTConfig.config_name))
    out, absent = [], object()
    for arg in argv:
        if arg.startswith("+") and not arg.startswith("++") and "=" in arg:
            key = arg[1:].split("=", 1)[0]
            if OmegaConf.select(defaults, key, default=absent) is not absent:
                arg = arg[1:]
        out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run verl-style SFT from command-line arguments (``sys.argv[1:]`` when ``argv`` is None); the exit code."""
    argv = _existing_key_adds_as_sets(list(sys.argv[1:] if argv is None else argv))
    return run_entrypoint(
        argv,
        prog="python -m verl.trainer.fsdp_sft_trainer",
        description="Supervised fine-tuning with verl's SFT keys (defaults in fsdp_sft_trainer.yaml).",
        config_name=FSDPSFTConfig.config_name,
        schema=FSDPSFTConfig,
        load_run_fn=_load_run,
    )


if __name__ == "__main__":
    sys.exit(main())
