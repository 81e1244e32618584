"""The workers' Ray runtime environment (``verl.trainer.constants_ppo``) and its use by ``ray_init_kwargs``."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl.trainer.config.loader import load_config
from verl.trainer.constants_ppo import NVTX_INJECTION_ENV, get_ppo_ray_runtime_env
from verl.trainer.ppo.runner import ray_init_kwargs


def test_defaults_and_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VERL_DEVICE", raising=False)
    assert get_ppo_ray_runtime_env() == {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}
    monkeypatch.setenv("VERL_DEVICE", "cpu")
    assert get_ppo_ray_runtime_env()["env_vars"]["VERL_DEVICE"] == "cpu"


def test_torch_profiler_disables_an_inherited_nvtx_injection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NVTX_INJECTION_ENV, "/usr/local/cuda/lib64/libcupti.so")
    monkeypatch.delenv("VERL_KEEP_NVTX_INJECTION", raising=False)
    torch_cfg = OmegaConf.create({"global_profiler": {"tool": "torch"}})
    value = get_ppo_ray_runtime_env(torch_cfg)["env_vars"][NVTX_INJECTION_ENV]
    assert value and "libcupti" not in value
    assert NVTX_INJECTION_ENV not in get_ppo_ray_runtime_env({"global_profiler": {"tool": None}})["env_vars"]
    monkeypatch.setenv("VERL_KEEP_NVTX_INJECTION", "1")
    assert NVTX_INJECTION_ENV not in get_ppo_ray_runtime_env(torch_cfg)["env_vars"]


def test_ray_init_sends_it_under_the_users_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VERL_KEEP_NVTX_INJECTION", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = load_config(
        [
            "global_profiler.tool=torch",
            "global_profiler.steps=[1]",
            "+ray_kwargs.ray_init.runtime_env.env_vars.TOKENIZERS_PARALLELISM='true'",
        ]
    )
    env_vars = ray_init_kwargs(cfg)["runtime_env"]["env_vars"]
    assert env_vars["TOKENIZERS_PARALLELISM"] == "true"  # the user's value wins
    assert NVTX_INJECTION_ENV in env_vars
