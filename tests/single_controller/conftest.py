"""Ray is started once for the whole session (only by tests that ask for ``ray_session``) and stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A local Ray (loopback only) with 8 logical CPUs; the actors of the tests ask for fractions of them."""
    ray = pytest.importorskip("ray")
    from verl.single_controller.ray import start_or_join_ray

    started = not ray.is_initialized()
    if started:
        # the product's path: a local Ray on 127.0.0.1 only
        start_or_join_ray(
            num_cpus=8,
            num_gpus=0,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            # One torch/OMP thread per actor: the test machine has 2 cores shared by many processes.
            runtime_env={
                "env_vars": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
            },
        )
    yield
    if started:
        ray.shutdown()
