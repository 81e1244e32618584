"""Upstream verl v0.9's driver-launched SFT: ``python -m verl.trainer.sft_trainer_ray trainer.nnodes=1
trainer.n_gpus_per_node=8 key=value ...`` with the keys of ``verl.trainer.sft_trainer``.

Upstream starts its SFT workers from one driver process (Ray, "single-controller mode") instead of ``torchrun``;
the config is the same ``sft_trainer_engine``. Here the driver is this process: it validates the config (``--cfg
job`` prints it, as for ``sft_trainer``), and

* one rank (``trainer.nnodes * trainer.n_gpus_per_node = 1``) trains in this process;
* the ranks of one node are started by the driver as ``torch.distributed.run --standalone --nproc_per_node=N -m
  verl.trainer.sft_trainer`` with the validated config written to ``<trainer.default_local_dir>/.launch/`` (the same
  trainer, loss and checkpoints as a ``torchrun`` launch); the driver waits and returns their exit code;
* the ranks of several nodes are Ray actors, as upstream's are: the driver starts or joins Ray (``$RAY_ADDRESS``,
  as ``ray.init()`` does upstream; a local Ray listens on loopback only), asks for one placement group of
  ``n_gpus_per_node`` bundles per node and starts one :class:`SFTRankWorker` per bundle. Each actor gets
  torchrun's variables from the worker group and runs the same SPMD trainer as a ``torchrun`` rank; the driver
  waits for all of them and returns rank 0's final metrics. A rank that dies stops the others and names its node.

See docs/offline_trainers.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.single_controller.base.worker import Worker
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


class SFTRankWorker(Worker):
    """One rank of the SFT trainer in a Ray actor: the worker group's environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ...) makes it join the others' torch.distributed group, as a ``torchrun`` rank would."""

    def __init__(self, config_yaml: str) -> None:
        super().__init__()
        self._config_yaml = config_yaml

    def fit(self) -> dict[str, float]:
        """Train this rank; its final metrics."""
        return run_sft_engine(OmegaConf.create(self._config_yaml))


def run_on_ray(cfg: DictConfig) -> dict[str, float]:
    """Train ``cfg`` with one Ray actor per rank: ``trainer.nnodes`` placement groups of ``trainer.n_gpus_per_node``
    bundles (a GPU each when ``trainer.device=cuda``); rank 0's final metrics.

    Raises:
        WorkerDiedError: a rank's process died (the others are stopped).
        RuntimeError: the cluster cannot hold the placement groups (what was asked for and what it has).
    """
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup, start_or_join_ray

    start_or_join_ray(include_dashboard=False, log_to_driver=True)
    nnodes, per_node = int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node)
    pool = RayResourcePool([per_node] * nnodes, use_gpu=str(cfg.trainer.device) == "cuda", name_prefix="sft")
    worker = RayClassWithInitArgs(SFTRankWorker, OmegaConf.to_yaml(cfg, resolve=True))
    group = RayWorkerGroup(pool, worker, worker_env={"TOKENIZERS_PARALLELISM": "false"})
    try:
        return group.execute_all_sync("fit")[0]
    finally:
        group.shutdown()
        pool.remove()


def run_from_driver(cfg: DictConfig) -> dict[str, float] | None:
    """Train ``cfg`` (a validated ``sft_trainer_engine`` config) from this driver process (module docstring).

    Returns the final metrics when the run trained in this process or in Ray actors (rank 0's), None when the
    ranks of one node started by ``torch.distributed.run`` did.

    Raises:
        ConfigError: a launcher's ``WORLD_SIZE`` that differs from ``trainer.nnodes x trainer.n_gpus_per_node``.
        RuntimeError: the ranks' launcher exited with an error (its exit code), or Ray could not place the ranks.
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
        return run_on_ray(cfg)
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
