"""The environment of the PPO run's Ray workers (upstream verl's ``verl.trainer.constants_ppo``).

:func:`get_ppo_ray_runtime_env` is the ``runtime_env`` that :func:`verl.trainer.ppo.runner.ray_init_kwargs` merges
under the user's ``ray_kwargs.ray_init.runtime_env`` (whose values win):

- ``TOKENIZERS_PARALLELISM=false`` (:data:`PPO_RAY_RUNTIME_ENV`): the workers tokenize from several threads of one
  process, where the tokenizers' own pool would oversubscribe the cores and warn after a fork;
- ``VERL_DEVICE``, when the driver set it (``trainer.device``), so the workers pick the same device kind;
- with ``global_profiler.tool=torch``, ``NVTX_INJECTION64_PATH`` set to a path that loads nothing (upstream v0.9,
  ``verl/trainer/constants_ppo.py``): some CUDA images point it at ``libcupti.so``, and the first NVTX range of a
  process then takes the one CUPTI subscriber slot that torch.profiler (Kineto) needs, so traces lose every GPU
  kernel. ``VERL_KEEP_NVTX_INJECTION=1`` keeps the inherited value;
- with ``trainer.debug`` (verl-recipe spo's key), ``RAY_DEBUG=legacy``: a ``breakpoint()`` in a worker waits for
  ``ray debug`` in another shell (Ray's legacy debugger) instead of failing without a terminal.

Unlike upstream, a default is sent even when the launching shell has the variable: a worker on a joined Ray
cluster does not inherit the driver's shell (set the variable under ``ray_kwargs.ray_init.runtime_env.env_vars``
to change it).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from verl.base_config import get_config_value

__all__ = ["NVTX_INJECTION_ENV", "PPO_RAY_RUNTIME_ENV", "get_ppo_ray_runtime_env"]

logger = logging.getLogger(__name__)

#: the CUDA toolkit's variable naming a library that handles NVTX ranges (the injection point CUPTI uses)
NVTX_INJECTION_ENV = "NVTX_INJECTION64_PATH"
# non-empty, so a startup hook that only fills the variable in when it is unset cannot restore libcupti
_NVTX_INJECTION_DISABLED = "/nonexistent/verl-nvtx-injection-disabled.so"
_KEEP_NVTX = "VERL_KEEP_NVTX_INJECTION"

#: the workers' default environment variables (merged under the user's ``ray_init.runtime_env.env_vars``)
PPO_RAY_RUNTIME_ENV: dict[str, dict[str, str]] = {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}


def get_ppo_ray_runtime_env(config: Any = None) -> dict[str, Any]:
    """The workers' ``runtime_env`` (``{"env_vars": {name: value}}``) for the run of ``config`` (a PPO config,
    ``DictConfig`` or mapping; None: no profiler). See the module docstring for what it holds and why."""
    env_vars = dict(PPO_RAY_RUNTIME_ENV["env_vars"])
    if os.environ.get("VERL_DEVICE"):
        env_vars["VERL_DEVICE"] = os.environ["VERL_DEVICE"]
    if get_config_value(config, "global_profiler.tool") == "torch" and os.environ.get(_KEEP_NVTX) != "1":
        env_vars[NVTX_INJECTION_ENV] = _NVTX_INJECTION_DISABLED
        logger.warning(
            "global_profiler.tool=torch: the workers get %s=%s so torch.profiler can subscribe to CUPTI and record "
            "GPU kernels (was %s); %s=1 keeps the inherited value",
            NVTX_INJECTION_ENV,
            _NVTX_INJECTION_DISABLED,
            os.environ.get(NVTX_INJECTION_ENV) or "unset",
            _KEEP_NVTX,
        )
    if get_config_value(config, "trainer.debug"):
        env_vars["RAY_DEBUG"] = "legacy"
    return {"env_vars": env_vars}
