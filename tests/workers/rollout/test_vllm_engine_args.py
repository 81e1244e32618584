"""verl's vLLM engine keys in the rollout section become vllm.LLM arguments (no vLLM needed to check the mapping)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from verl.trainer.config import ConfigError, load_config


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


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (pip install -e .[vllm])")
def test_dummy_weights_are_replaced_by_a_layered_sync(tmp_path, make_prompts) -> None:
    """load_format=dummy starts vLLM from random weights: greedy generation can only match the actor's own (hf)
    generation if the layered, lazily consumed weight sync delivered every tensor."""
    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
    from verl.single_controller import create_worker_group
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    spec = TinyModelSpec(arch="qwen2", hidden_size=128, num_attention_heads=2, num_key_value_heads=1)
    make_tiny_causal_lm(spec, save_dir=str(tmp_path), seed=0)
    common = [
        f"actor_rollout_ref.model.path={tmp_path}",
        "data.max_prompt_length=8",
        "data.max_response_length=6",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.do_sample=false",
        "actor_rollout_ref.rollout.max_num_seqs=8",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    ]
    vllm_cfg = load_config(
        [
            *common,
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.load_format=dummy",
            "actor_rollout_ref.rollout.layered_summon=true",
            "actor_rollout_ref.rollout.enable_prefix_caching=false",
        ]
    )
    hf_cfg = load_config([*common, "actor_rollout_ref.rollout.name=hf"])
    prompts = make_prompts([[10, 20, 30], [40, 50, 60, 70, 80]], do_sample=False)
    outputs = {}
    for name, cfg in (("hf", hf_cfg), ("vllm", vllm_cfg)):
        group = create_worker_group(
            "local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": "actor_rollout"}
        )
        try:
            group.init_model()
            assert group.workers[0].rollout_name == name
            outputs[name] = group.generate_sequences(prompts).batch["responses"]
        finally:
            rollout = group.workers[0].rollout
            if name == "vllm" and rollout is not None:
                rollout.shutdown()
            group.shutdown()
    assert torch.equal(outputs["vllm"], outputs["hf"])


def test_tensor_parallel_size_must_divide_the_actor_ranks() -> None:
    from verl.workers.rollout.base import rollout_tp_error

    assert rollout_tp_error(1, 1) is None and rollout_tp_error(2, 2) is None and rollout_tp_error(2, 8) is None
    for tp, world in ((2, 1), (4, 6)):
        error = rollout_tp_error(tp, world)
        assert error.startswith(f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} must divide")
    assert "must be >= 1" in rollout_tp_error(0, 2)


def test_auto_picks_vllm_for_several_ranks_and_names_an_unusable_tp(tmp_path) -> None:
    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
    from verl.workers.rollout.base import vllm_usable_for

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed")
    spec = TinyModelSpec(arch="qwen2", hidden_size=128, num_attention_heads=2, num_key_value_heads=1)
    make_tiny_causal_lm(spec, save_dir=str(tmp_path), seed=0)
    assert vllm_usable_for(str(tmp_path), world_size=2) == (True, "")
    assert vllm_usable_for(str(tmp_path), world_size=4, tensor_parallel_size=2) == (True, "")
    usable, why_not = vllm_usable_for(str(tmp_path), world_size=2, tensor_parallel_size=4)
    assert not usable and why_not.startswith("actor_rollout_ref.rollout.tensor_model_parallel_size=4")


def test_a_context_past_the_models_positions_is_refused_naming_the_keys(tmp_path, monkeypatch) -> None:
    """vLLM refuses max_model_len > max_position_embeddings deep in its engine; the trainer says so at run start."""
    from verl.models.tiny import make_tiny_model_dir
    from verl.workers.rollout.vllm_rollout import check_context_length, context_length_problem

    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    assert context_length_problem({"max_position_embeddings": 512}, 512, "c.json") is None
    problem = context_length_problem({"max_position_embeddings": 512}, 520, "c.json")
    assert "context of 520 tokens" in problem and "max_position_embeddings is 512 (c.json)" in problem
    assert "data.max_prompt_length" in problem
    vlm = {"text_config": {"max_position_embeddings": 256}, "vision_config": {}}
    assert "is 256" in context_length_problem(vlm, 300, "c.json")
    rope = {"max_position_embeddings": 512, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    assert context_length_problem(rope, 2048, "c.json") is None  # vLLM derives the longer limit itself
    v5 = {"max_position_embeddings": 512, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}}
    assert context_length_problem(v5, 2048, "c.json") is None  # transformers 5 writes rope_parameters
    plain_v5 = {"max_position_embeddings": 512, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
    assert "is 512" in context_length_problem(plain_v5, 520, "c.json")
    model = make_tiny_model_dir(str(tmp_path / "tiny"))  # max_position_embeddings 512
    check_context_length(model, _rollout("data.max_prompt_length=256", "data.max_response_length=256"))
    with pytest.raises(ConfigError, match=r"context of 520 tokens .* max_position_embeddings is 512"):
        check_context_length(model, _rollout("data.max_prompt_length=512", "data.max_response_length=8"))
    check_context_length(model, _rollout("data.max_prompt_length=512", "actor_rollout_ref.rollout.max_model_len=512"))
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    check_context_length(model, _rollout("data.max_prompt_length=512", "data.max_response_length=8"))
