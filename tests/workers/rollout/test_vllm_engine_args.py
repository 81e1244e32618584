"""verl's vLLM engine keys in the rollout section become vllm.LLM arguments (no vLLM needed to check the mapping)."""

from __future__ import annotations

import pytest

from verl.trainer.config import load_config


def _rollout(*overrides: str):
    return load_config(list(overrides)).actor_rollout_ref.rollout


def test_engine_options_are_passed_under_vllms_names() -> None:
    from verl.workers.rollout.vllm_rollout import engine_args_from_config

    rollout = _rollout(
        "actor_rollout_ref.rollout.enable_chunked_prefill=false",
        "actor_rollout_ref.rollout.max_num_batched_tokens=4096",
        "actor_rollout_ref.rollout.enable_prefix_caching=false",
        "actor_rollout_ref.rollout.disable_log_stats=false",
        "actor_rollout_ref.rollout.load_format=dummy",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=2",
    )
    assert engine_args_from_config(rollout, max_model_len=80) == {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": 4096,
        "enable_prefix_caching": False,
        "disable_log_stats": False,
        "load_format": "dummy",
        "swap_space": 2,
    }
    # the defaults are verl's (chunked prefill and prefix caching on, 8192-token batches, real weights)
    defaults = engine_args_from_config(_rollout(), max_model_len=80)
    assert defaults == {
        "enable_chunked_prefill": True,
        "max_num_batched_tokens": 8192,
        "enable_prefix_caching": True,
        "disable_log_stats": True,
        "load_format": "auto",
    }


def test_a_token_budget_below_one_sequence_needs_chunked_prefill() -> None:
    from verl.workers.rollout.vllm_rollout import engine_args_from_config

    rollout = _rollout(
        "actor_rollout_ref.rollout.enable_chunked_prefill=false", "actor_rollout_ref.rollout.max_num_batched_tokens=64"
    )
    with pytest.raises(ValueError, match=r"max_num_batched_tokens=64 is below max_model_len=80"):
        engine_args_from_config(rollout, max_model_len=80)
    chunked = _rollout("actor_rollout_ref.rollout.max_num_batched_tokens=64")
    assert engine_args_from_config(chunked, max_model_len=80)["max_num_batched_tokens"] == 64
