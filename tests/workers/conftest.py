"""Fixtures shared by the worker tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def ray_cpu() -> Iterator[None]:
    """One Ray session for the module (reused if the suite already started one); ranks are CPU-only, and so is the
    1-rank reference in this process."""
    ray = pytest.importorskip("ray")
    old_device = os.environ.get("VERL_DEVICE")
    os.environ["VERL_DEVICE"] = "cpu"
    started = not ray.is_initialized()
    if started:
        from verl.single_controller.ray import start_or_join_ray

        # the product's path: a local Ray on 127.0.0.1 only
        start_or_join_ray(
            num_cpus=4,
            num_gpus=0,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "VERL_DEVICE": "cpu"}},
        )
    yield
    if started:
        ray.shutdown()
    if old_device is None:
        os.environ.pop("VERL_DEVICE", None)
    else:
        os.environ["VERL_DEVICE"] = old_device
