"""Upstream verl v0.9's performance / engine / worker keys: accepted, resolved, and where they take effect; other
engines refused in one line (verl/trainer/config/upstream_engines.py, upstream_keys.py)."""

from __future__ import annotations

import os

import pytest

from verl.trainer.config import load_config
from verl.trainer.config.entrypoint import build_parser, config_source
from verl.trainer.config.upstream_engines import refusal_for_config_name, refusal_for_override
from verl.trainer.config.validation import ConfigError
from verl.workers.config import ActorRolloutRefConfig
from verl.workers.fsdp_setup import private_section

DATA = ["data.train_files=train.parquet"]
ARR = "actor_rollout_ref"


def _cfg(*overrides: str):
    return load_config([*DATA, *overrides])


@pytest.mark.parametrize("engine", ["dp", "fsdp", "fsdp2"])
def test_model_engine_fsdp_names_select_our_workers(engine: str) -> None:
    cfg = _cfg(f"model_engine={engine}")
    assert cfg.model_engine == engine and cfg.actor_rollout_ref.actor.strategy == "fsdp"


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("model_engine=megatron", "Megatron-LM"),
        ("model_engine=veomni", "VeOmni"),
        ("model_engine=torchtitan", "TorchTitan"),
        ("actor_rollout_ref.actor.strategy=megatron", "Megatron-LM"),
        ("actor@actor_rollout_ref.actor=mlite_actor", "Megatron-LM"),
        ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", "Megatron-LM"),
        ("actor_rollout_ref.rollout.name=sglang", "SGLang"),
        ("actor_rollout_ref.rollout.name=trtllm", "TensorRT-LLM"),
        ("+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=fa3", "SGLang"),
        ("trainer.device=npu", "Ascend NPU"),
    ],
)
def test_other_engines_are_refused_in_one_line(override: str, names: str) -> None:
    line = refusal_for_override(override)
    assert line is not None and names in line and "use " in line
    with pytest.raises(ConfigError) as err:
        _cfg("actor_rollout_ref.model.use_fused_kernels=true", override)
    assert len(err.value.problems) == 1 and names in err.value.problems[0] and "not " in err.value.problems[0]


def test_fsdp_values_are_not_refused() -> None:
    for ok in ["model_engine=fsdp", "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=megatron-x"]:
        assert refusal_for_override(ok) is None, ok


def test_only_the_last_override_of_a_key_is_refused_or_kept() -> None:
    # a recipe script asks for SGLang; the user appends another engine, which Hydra's last-wins order selects
    assert _cfg(f"{ARR}.rollout.name=sglang", f"{ARR}.rollout.name=hf").actor_rollout_ref.rollout.name == "hf"
    with pytest.raises(ConfigError, match="SGLang is not an engine here"):
        _cfg(f"{ARR}.rollout.name=hf", f"+{ARR}.rollout.name=sglang")


def test_an_engine_named_in_a_config_file_is_refused_in_the_same_line(tmp_path) -> None:
    from verl.trainer.config.loader import load_config as load

    (tmp_path / "recipe.yaml").write_text(
        "defaults:\n  - ppo_trainer\n  - _self_\nactor_rollout_ref:\n  rollout:\n    name: sglang\n"
    )
    with pytest.raises(ConfigError, match=r"rollout.name=sglang: SGLang is not an engine here.*from the config file"):
        load([*DATA], config_file=str(tmp_path / "recipe.yaml"))
    cfg = load([*DATA, f"{ARR}.rollout.name=hf"], config_file=str(tmp_path / "recipe.yaml"))
    assert cfg.actor_rollout_ref.rollout.name == "hf"


def test_upstream_config_names() -> None:
    assert "Megatron-LM" in (refusal_for_config_name("ppo_megatron_trainer") or "")
    assert refusal_for_config_name("ppo_trainer") is None
    args = build_parser("p", "d").parse_intermixed_args(["--config-path=config", "--config-name=ppo_trainer"])
    assert config_source(args, "ppo_trainer") == ("ppo_trainer", None, None)  # upstream's packaged dir = ours
    args = build_parser("p", "d").parse_intermixed_args(["--config-path=config", "--config-name=ppo_megatron_trainer"])
    with pytest.raises(ConfigError, match="Megatron-LM is not an engine here"):
        config_source(args, "ppo_trainer")


def test_sequence_parallel_under_fsdp_config_is_the_ulysses_size() -> None:
    cfg = _cfg(
        "trainer.n_gpus_per_node=4",
        f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size=2",
        f"{ARR}.ref.fsdp_config.ulysses_sequence_parallel_size=4",
    )
    arr = private_section(cfg.actor_rollout_ref, ActorRolloutRefConfig)
    assert arr.actor.ulysses_sequence_parallel_size == 2 == arr.actor.fsdp_config.ulysses_sequence_parallel_size
    assert arr.ref.ulysses_sequence_parallel_size == 4 == arr.ref.fsdp_config.ulysses_sequence_parallel_size
    # the reference follows the actor when none of its own keys is set; the old name fills the new one
    follow = _cfg("trainer.n_gpus_per_node=2", f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size=2")
    assert follow.actor_rollout_ref.ref.ulysses_sequence_parallel_size == 2
    old = _cfg("trainer.n_gpus_per_node=2", f"{ARR}.actor.ulysses_sequence_parallel_size=2")
    assert old.actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size == 2
    assert old.actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size == 2


def test_conflicting_sequence_parallel_sizes_are_refused() -> None:
    with pytest.raises(ConfigError, match="one setting under two names"):
        _cfg(
            "trainer.n_gpus_per_node=4",
            f"{ARR}.actor.ulysses_sequence_parallel_size=2",
            f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size=4",
        )


def test_worker_keys_resolve_into_the_typed_sections() -> None:
    cfg = _cfg(
        f"{ARR}.model.use_fused_kernels=true",
        f"{ARR}.model.fused_kernel_options.impl_backend=triton",
        f"{ARR}.model.exclude_modules=.*visual.*",
        f"{ARR}.actor.entropy_from_logits_with_chunking=true",
        f"{ARR}.actor.entropy_checkpointing=true",
        f"{ARR}.ref.strategy=fsdp2",
        f"{ARR}.ref.use_torch_compile=false",
        f"{ARR}.actor.fsdp_config.offload_policy=true",
        f"{ARR}.actor.fsdp_config.forward_prefetch=true",
        f"{ARR}.actor.fsdp_config.model_dtype=bfloat16",
        f"{ARR}.ref.fsdp_config.model_dtype=bf16",
        f"{ARR}.actor.fsdp_config.use_orig_params=true",
        f"{ARR}.rollout.checkpoint_engine.update_weights_bucket_megabytes=4096",
        f"{ARR}.rollout.ignore_eos=false",
        f"{ARR}.nccl_timeout=7200",
    )
    arr = private_section(cfg.actor_rollout_ref, ActorRolloutRefConfig)
    assert arr.model.use_fused_kernels and arr.model.fused_kernel_options.impl_backend == "triton"
    assert arr.model.exclude_modules == ".*visual.*"
    assert arr.actor.entropy_from_logits_with_chunking and arr.actor.entropy_checkpointing
    assert arr.ref.strategy == "fsdp2" and arr.ref.use_torch_compile is False
    assert arr.actor.fsdp_config.offload_policy and arr.actor.fsdp_config.forward_prefetch
    assert arr.actor.fsdp_config.model_dtype == "bfloat16" and arr.ref.fsdp_config.model_dtype == "bf16"
    assert arr.rollout.checkpoint_engine.update_weights_bucket_megabytes == 4096
    assert arr.rollout.checkpoint_engine.backend == "naive" and arr.nccl_timeout == 7200


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (f"{ARR}.ref.strategy=ddp", "ref.strategy='ddp' is not implemented"),
        (f"{ARR}.rollout.checkpoint_engine.backend=nccl", "checkpoint_engine.backend"),
        (f"{ARR}.actor.fsdp_config.model_dtype=fp16", "model_dtype"),
    ],
)
def test_values_we_cannot_honour_are_errors(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("'", ".")):
        _cfg(override)


def test_prefix_grouper_is_accepted_and_refused_with_what_it_cannot_serve() -> None:
    assert _cfg(f"{ARR}.actor.use_prefix_grouper=true").actor_rollout_ref.actor.use_prefix_grouper is True
    with pytest.raises(ConfigError, match="use_prefix_grouper=true .*use_remove_padding=false"):
        _cfg(f"{ARR}.actor.use_prefix_grouper=true", f"{ARR}.model.use_remove_padding=true")
    with pytest.raises(ConfigError, match="use_prefix_grouper=true .*attn_implementation=flash_attention_2"):
        _cfg(f"{ARR}.actor.use_prefix_grouper=true", f"{ARR}.model.attn_implementation=flash_attention_2")


def test_ignore_eos_is_accepted_for_single_turn_and_refused_for_agent_loops() -> None:
    assert _cfg(f"{ARR}.rollout.ignore_eos=true").actor_rollout_ref.rollout.ignore_eos is True
    for loops in (f"{ARR}.rollout.multi_turn.enable=true", f"{ARR}.rollout.mode=async"):
        with pytest.raises(ConfigError, match=r"ignore_eos=true with agent loops \(rollout.multi_turn.enable or mode"):
            _cfg(f"{ARR}.rollout.ignore_eos=true", loops)


def test_ref_compile_follows_the_actor_by_default() -> None:
    assert _cfg(f"{ARR}.actor.use_torch_compile=true").actor_rollout_ref.ref.use_torch_compile is True


def test_entropy_chunking_selects_upstream_block_size() -> None:
    import torch

    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.actor.token_scoring import entropy_or_none

    cfg = _cfg(f"{ARR}.actor.entropy_from_logits_with_chunking=true")
    actor = DataParallelPPOActor(cfg.actor_rollout_ref.actor, torch.nn.Linear(2, 2))
    assert actor.entropy_chunk_size == 2048  # upstream's default block
    sized = _cfg(
        f"{ARR}.actor.entropy_from_logits_with_chunking=true", f"{ARR}.actor.entropy_from_logits_chunk_size=64"
    )
    assert DataParallelPPOActor(sized.actor_rollout_ref.actor, torch.nn.Linear(2, 2)).entropy_chunk_size == 64
    plain = DataParallelPPOActor(_cfg().actor_rollout_ref.actor, torch.nn.Linear(2, 2))
    assert plain.entropy_chunk_size is None
    logits = torch.randn(2, 5, 7)
    expected = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    torch.testing.assert_close(entropy_or_none(logits, True, False, 3), expected)


def test_fsdp_engine_keys_reach_fully_shard() -> None:
    import torch

    from verl.utils import fsdp_utils

    assert fsdp_utils.gather_dtype("bfloat16") is torch.bfloat16 and fsdp_utils.gather_dtype("bf16") is torch.bfloat16
    assert fsdp_utils.gather_dtype("fp32") is None


def test_lora_exclude_modules_reach_peft() -> None:
    from verl.models.lora import _exclude

    assert _exclude(".*visual.*", False) == ".*visual.*"
    assert _exclude(["lm_head"], True) == ["lm_head"]
    assert _exclude(None, True) is not None and _exclude(None, False) is None


def test_entropy_keys_under_fsdp_config_are_the_actors() -> None:
    cfg = _cfg(
        f"{ARR}.actor.fsdp_config.entropy_from_logits_with_chunking=true",
        f"{ARR}.actor.fsdp_config.entropy_checkpointing=true",
    )
    assert cfg.actor_rollout_ref.actor.entropy_from_logits_with_chunking is True
    assert cfg.actor_rollout_ref.actor.entropy_checkpointing is True


def test_fsdp_turbo_is_refused_in_one_line() -> None:
    line = refusal_for_override("+actor_rollout_ref.actor.fsdp_config.turbo_config.distributed.x={a:{}}")
    assert line is not None and "FSDP Turbo is not an engine here" in line
    assert "FSDP Turbo" in (refusal_for_override(f"{ARR}.ref.strategy=fsdp_turbo") or "")


def test_critic_fsdp_is_the_critics_fsdp_config() -> None:
    cfg = _cfg("critic.fsdp.param_offload=true", "critic.fsdp.forward_prefetch=true")
    assert cfg.critic.fsdp_config.param_offload is True and cfg.critic.fsdp_config.forward_prefetch is True


def test_data_trust_remote_code_and_shared_engine_keys_resolve() -> None:
    cfg = _cfg(
        "data.trust_remote_code=true",
        "trainer.allow_unsafe_operations=true",
        f"{ARR}.ref.fsdp_config.optimizer_offload=true",
        f"{ARR}.rollout.multi_stage_wake_up=true",
        f"{ARR}.model.use_shm=true",
        "critic.model.use_shm=true",
    )
    assert cfg.data.trust_remote_code is True and cfg.actor_rollout_ref.ref.fsdp_config.optimizer_offload is True
    assert cfg.actor_rollout_ref.rollout.multi_stage_wake_up is True
    assert cfg.actor_rollout_ref.model.use_shm is True and cfg.critic.model.use_shm is True


def test_deprecated_global_micro_batch_sizes_become_per_rank_sizes() -> None:
    cfg = _cfg(
        "trainer.n_gpus_per_node=8",
        f"{ARR}.actor.ulysses_sequence_parallel_size=2",
        f"{ARR}.actor.ppo_micro_batch_size=16",  # 8 ranks / sp 2 = 4 data-parallel ranks
        f"{ARR}.rollout.log_prob_micro_batch_size=32",
        f"{ARR}.ref.log_prob_micro_batch_size=8",
        "critic.ppo_micro_batch_size=64",  # critic sp 1: 8 ranks
        "critic.forward_micro_batch_size=16",
    )
    arr = cfg.actor_rollout_ref
    # the global size is consumed: the typed sections (upstream's rule) refuse both sizes set
    assert arr.actor.ppo_micro_batch_size_per_gpu == 4 and arr.actor.ppo_micro_batch_size is None
    assert cfg.critic.ppo_micro_batch_size is None and cfg.critic.forward_micro_batch_size is None
    assert arr.rollout.log_prob_micro_batch_size_per_gpu == 8 and arr.ref.log_prob_micro_batch_size_per_gpu == 2
    assert cfg.critic.ppo_micro_batch_size_per_gpu == 8 and cfg.critic.forward_micro_batch_size_per_gpu == 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([f"{ARR}.actor.ppo_micro_batch_size=8", f"{ARR}.actor.ppo_micro_batch_size_per_gpu=2"], "give only"),
        (["trainer.n_gpus_per_node=4", f"{ARR}.actor.ppo_micro_batch_size=2"], ">= the 4 data-parallel ranks"),
    ],
)
def test_bad_global_micro_batch_sizes_are_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _cfg(*overrides)


def test_use_shm_copies_the_model_once(tmp_path) -> None:
    from verl.models.shm import copy_to_shm

    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "model.safetensors").write_bytes(b"x" * 100)
    shm = tmp_path / "shm"
    shm.mkdir()
    dest = copy_to_shm(str(src), shm_root=str(shm))
    assert dest.startswith(str(shm)) and sorted(os.listdir(dest)) == ["config.json", "model.safetensors"]
    assert copy_to_shm(str(src), shm_root=str(shm)) == dest  # reused
    assert sorted(os.listdir(shm / "verl-models")) == [os.path.basename(dest)]  # no partial copies left
    assert copy_to_shm(str(src), shm_root=str(tmp_path / "absent")) == str(src)  # no /dev/shm: in place


def test_image_patch_size_must_match_the_processor() -> None:
    from types import SimpleNamespace

    from verl.models.vlm import check_image_patch_size

    assert _cfg("data.image_patch_size=16").data.image_patch_size == 16
    qwen3_vl = SimpleNamespace(image_processor=SimpleNamespace(patch_size=16))
    check_image_patch_size(16, qwen3_vl)
    check_image_patch_size(None, qwen3_vl)
    check_image_patch_size(14, None)  # a text model
    with pytest.raises(ValueError, match="uses 16-pixel patches"):
        check_image_patch_size(14, qwen3_vl)


def test_activation_offload_moves_saved_tensors_to_the_host_on_accelerators() -> None:
    import contextlib

    import torch

    from verl.workers.actor.dp_actor import DataParallelPPOActor, activation_offload

    assert isinstance(activation_offload(True, "cuda"), torch.autograd.graph.save_on_cpu)
    assert isinstance(activation_offload(True, "cpu"), contextlib.nullcontext)
    assert isinstance(activation_offload(False, "cuda"), contextlib.nullcontext)
    cfg = _cfg(f"{ARR}.model.enable_activation_offload=true")
    assert cfg.actor_rollout_ref.model.enable_activation_offload is True
    actor = DataParallelPPOActor(cfg.actor_rollout_ref.actor, torch.nn.Linear(2, 2), offload_activations=True)
    assert actor.offload_activations is True


def test_data_trust_remote_code_needs_unsafe_operations_like_the_models(model_dir_with_code) -> None:
    model = f"{ARR}.model.path={model_dir_with_code}"
    with pytest.raises(ConfigError, match="data.trust_remote_code=true runs Python files"):
        _cfg(model, "data.trust_remote_code=true")
    assert _cfg(model, "data.trust_remote_code=true", "trainer.allow_unsafe_operations=true").data.trust_remote_code
    with pytest.raises(ConfigError) as err:  # upstream's MiniCPM-o script sets both: one line names both keys
        _cfg(model, "data.trust_remote_code=true", f"{ARR}.model.trust_remote_code=true")
    assert err.value.problems == [
        "data.trust_remote_code, actor_rollout_ref.model.trust_remote_code=true runs Python files from the model "
        f"directory {model_dir_with_code} (config.json: AutoModelForCausalLM -> modeling_custom.CustomForCausalLM), "
        "which is not allowed here unless trainer.allow_unsafe_operations=true (the security switch): add it to run "
        "the model's code"
    ]


def test_a_missing_relative_config_path_with_another_name_is_still_an_error() -> None:
    args = build_parser("p", "d").parse_intermixed_args(["--config-path=nope", "--config-name=mine"])
    assert config_source(args, "ppo_trainer") == ("ppo_trainer", os.path.join("nope", "mine.yaml"), None)


def test_sglang_engine_kwargs_section_is_refused() -> None:
    assert "SGLang" in (refusal_for_override(f"+{ARR}.rollout.engine_kwargs.sglang={{}}") or "")
    assert refusal_for_override(f"+{ARR}.rollout.engine_kwargs.vllm.swap_space=4") is None


def test_v09_engine_layout_keys_of_one_and_the_engines_compile_switch() -> None:
    """v0.9's fully_async geo3k Qwen3-VL-30B-A3B script: fsdp_config.use_torch_compile, rollout.expert_parallel_size."""
    cfg = _cfg(
        f"{ARR}.actor.fsdp_config.use_torch_compile=False",
        f"{ARR}.ref.fsdp_config.use_torch_compile=False",
        f"{ARR}.rollout.expert_parallel_size=1",
        f"{ARR}.rollout.data_parallel_size=1",
    )
    assert (
        cfg.actor_rollout_ref.actor.use_torch_compile is False and cfg.actor_rollout_ref.ref.use_torch_compile is False
    )
    for key in ("data_parallel_size", "expert_parallel_size", "pipeline_model_parallel_size"):
        with pytest.raises(ConfigError, match=rf"rollout.{key}=4: that rollout layout is not implemented here"):
            _cfg(f"{ARR}.rollout.{key}=4")


def test_fsdp_mixed_precision_as_upstreams_scripts_add_it() -> None:
    """``+...fsdp_config.mixed_precision.*`` (v0.9's LoRA scripts): param_dtype is model_dtype, reduce_dtype is the
    gradients' reduction dtype (verl/workers/fsdp_setup.py), buffers stay fp32."""
    mp = f"+{ARR}.actor.fsdp_config.mixed_precision"
    cfg = _cfg(f"{mp}.param_dtype=bf16", f"{mp}.reduce_dtype=bf16", f"{mp}.buffer_dtype=fp32")
    fsdp = cfg.actor_rollout_ref.actor.fsdp_config
    assert fsdp.model_dtype == "bf16" and fsdp.mixed_precision.reduce_dtype == "bf16"
    with pytest.raises(ConfigError, match="one setting here"):
        _cfg(f"{mp}.param_dtype=bf16", f"{ARR}.actor.fsdp_config.model_dtype=fp32")
    with pytest.raises(ConfigError, match=r"buffer_dtype=bf16: one of fp32, float32 here"):
        _cfg(f"{mp}.buffer_dtype=bf16")
    with pytest.raises(ConfigError, match="its keys are param_dtype, reduce_dtype, buffer_dtype"):
        _cfg("+critic.fsdp_config.mixed_precision.cast_forward_inputs=true")
