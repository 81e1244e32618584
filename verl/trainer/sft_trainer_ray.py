"""Upstream verl v0.9's driver-launched SFT: ``python -m verl.trainer.sft_trainer_ray trainer.nnodes=1
trainer.n_gpus_per_node=8 key=value ...`` with the keys of ``verl.trainer.sft_trainer``.

Upstream starts its SFT workers from one driver process (Ray, "single-controller mode") instead of ``torchrun``;
the config is the same ``sft_trainer_engine``. Here the driver is this process: it validates the config (``--cfg
job`` prints it, as for ``sft_trainer``), and

* one rank (``trainer.nnodes * trainer.n_gpus_per_node = 1``) trains in this process;
* the ranks of one node are started by the driver as ``torch.distributed.run --standalone --nproc_per_node=N -m
  verl.trainer.sft_trainer`` with the validated config written to ``<trainer.default_local_dir>/.launch/`` (the same
  trainer, loss and checkpoints as a ``torchrun`` launch); the driver waits and returns their exit code;
* several nodes are refused in one line: start ``torchrun`` on each node, which is upstream's multi-controller mode
  of the same trainer.

See docs/offline_trainers.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.fsdp_sft_schema import launcher_world_size
from verl.trainer.config.validation import ConfigError
from verl.trainer.sft_trainer import run_sft_engine, run_sft_entrypoint

PROG = "python -m verl.trainer.sft_trainer_ray"
LAUNCH_DIR = ".launch"


def launch_command(config_dir: str, config_name: str, nproc: int) -> list[str]:
    """The command that starts ``nproc`` ranks of ``verl.trainer.sft_trainer`` on this node with the config
    ``<config_dir>/<config_name>.yaml``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "verl.trainer.sft_trainer",
        f"--config-path={config_dir}",
        f"--config-name={config_name}",
    ]


def run_from_driver(cfg: DictConfig) -> dict[str, float] | None:
    """Train ``cfg`` (a validated ``sft_trainer_engine`` config) from this driver process (module docstring).

    Returns the final metrics when the run trained in this process, None when ranks started by the driver did.

    Raises:
        ConfigError: several nodes (one line with the ``torchrun`` command of each node), or a launcher's
            ``WORLD_SIZE`` that differs from ``trainer.nnodes x trainer.n_gpus_per_node``.
        RuntimeError: the ranks' launcher exited with an error (its exit code).
    """
    nnodes, per_node = int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node)
    launched = launcher_world_size()
    if launched is not None and nnodes * per_node > 1 and launched != nnodes * per_node:
        raise ConfigError(
            f"trainer.nnodes x trainer.n_gpus_per_node = {nnodes * per_node}, but this process runs under a launcher "
            f"with WORLD_SIZE={launched}; make them agree, or unset WORLD_SIZE so that the driver starts the ranks"
        )
    if launched is not None or nnodes * per_node == 1:
        return run_sft_engine(cfg)  # under torchrun already (each rank runs this), or one rank
    if nnodes > 1:
        raise ConfigError(
            f"trainer.nnodes={nnodes}: the driver starts the ranks of one node only; on each node run `torchrun "
            f"--nnodes={nnodes} --nproc_per_node={per_node} --rdzv_endpoint=<node 0>:29500 -m verl.trainer.sft_trainer "
            "...` with the same arguments"
        )
    config_dir = os.path.join(os.path.abspath(os.path.expanduser(str(cfg.trainer.default_local_dir))), LAUNCH_DIR)
    os.makedirs(config_dir, exist_ok=True)
    path = os.path.join(config_dir, "sft_trainer_engine.yaml")
    tmp = f"{path}.tmp-{os.getpid()}"
    OmegaConf.save(cfg, tmp, resolve=True)
    os.replace(tmp, path)
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}
    done = subprocess.run(launch_command(config_dir, "sft_trainer_engine", per_node), env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the {per_node} SFT ranks started by the driver exited with code {done.returncode}")
    return None


def _load_run() -> Callable[[DictConfig], Any]:
    return run_from_driver


def main(argv: list[str] | None = None) -> int:
    """Run v0.9's driver-launched SFT from command-line arguments (``sys.argv[1:]`` when None); the exit code."""
    description = (
        "Supervised fine-tuning started from one driver process (v0.9's sft_trainer_ray; the keys of "
        "sft_trainer_engine.yaml)."
    )
    return run_sft_entrypoint(argv, PROG, description, _load_run)


if __name__ == "__main__":
    sys.exit(main())
