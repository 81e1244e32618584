"""Placement and implemented-value checks: backend vs rank count, Ulysses / fsdp_size vs world size, values of verl
keys that select machinery this project does not have, and the critic.model.fsdp_config alias."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from verl.trainer.config import ConfigError, ConfigWarning, load_config
from verl.trainer.config.parallel_checks import resolve_backend


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(overrides)
    return info.value.problems


def test_backend_auto_picks_local_for_one_rank_and_ray_for_more() -> None:
    assert load_config([]).trainer.backend == "auto"
    assert resolve_backend(load_config([]).trainer) == "local"
    two = load_config(["trainer.n_gpus_per_node=2"])
    assert resolve_backend(two.trainer) == "ray"
    nodes = load_config(["trainer.nnodes=2", "data.train_batch_size=8"])
    assert resolve_backend(nodes.trainer) == "ray"
    assert resolve_backend(load_config(["trainer.backend=ray"]).trainer) == "ray"


def test_explicit_local_backend_with_several_ranks_is_an_error_with_the_fix() -> None:
    (msg,) = _problems(["trainer.backend=local", "trainer.n_gpus_per_node=2"])
    assert msg.startswith("trainer.backend=local runs every rank inside the driver process")
    assert "trainer.nnodes * trainer.n_gpus_per_node = 1 * 2 = 2 ranks" in msg
    assert "set trainer.backend=auto (or ray)" in msg


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        (
            "actor_rollout_ref.actor.strategy=megatron",
            "actor_rollout_ref.actor.strategy=megatron: Megatron-LM is not an engine here",
        ),
        ("critic.strategy=megatron", "critic.strategy=megatron: Megatron-LM is not an engine here"),
        ("actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.hybrid_engine=false (rollout on workers of its"),
    ],
)
def test_values_without_an_implementation_are_rejected(override: str, fragment: str) -> None:
    (msg,) = _problems([override])
    assert fragment in msg


def test_implemented_values_pass_and_legacy_worker_switch_is_a_notice() -> None:
    cfg = load_config(
        [
            "actor_rollout_ref.actor.strategy=fsdp2",
            "critic.strategy=fsdp",
            "actor_rollout_ref.rollout.mode=sync",
            "actor_rollout_ref.rollout.multi_turn.enable=false",
        ]
    )
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        load_config(["trainer.use_legacy_worker_impl=disable"])
    notices = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert any(n.startswith("trainer.use_legacy_worker_impl=disable: accepted") for n in notices)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        load_config(["actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"])
    assert any("tensor_model_parallel_size=2 applies to the vllm engine" in str(w.message) for w in caught)
    (msg,) = _problems(["trainer.use_legacy_worker_impl=maybe"])
    assert msg.startswith("trainer.use_legacy_worker_impl: expected one of auto, enable, disable")


def test_rollout_tensor_parallel_size_must_divide_the_world() -> None:
    """vLLM's tensor-parallel groups are actor ranks: a size that does not divide them is refused when the config
    is loaded (under rollout.name=auto it would otherwise fall back to hf and drop the setting)."""
    for name in ("auto", "vllm"):
        (msg,) = _problems(
            [f"actor_rollout_ref.rollout.name={name}", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"]
        )
        assert msg.startswith("actor_rollout_ref.rollout.tensor_model_parallel_size=2 must divide the number of")
    # 6 ranks: the batch (32 sequences) does not split over them either; every problem is reported at once
    msg, *others = _problems(["trainer.n_gpus_per_node=6", "actor_rollout_ref.rollout.tensor_model_parallel_size=4"])
    assert "(6)" in msg
    assert others and all("do not split evenly over world size" in m for m in others)
    two = load_config(["trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"])
    assert two.actor_rollout_ref.rollout.tensor_model_parallel_size == 2


def test_sequence_parallel_and_fsdp_sizes_must_divide_the_world() -> None:
    problems = _problems(
        [
            "trainer.n_gpus_per_node=4",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=3",
            "actor_rollout_ref.ref.ulysses_sequence_parallel_size=1",
            "actor_rollout_ref.actor.fsdp_config.fsdp_size=3",
        ]
    )
    assert any(
        p.startswith("actor_rollout_ref.actor.ulysses_sequence_parallel_size=3 does not divide") for p in problems
    )
    assert any(p.startswith("actor_rollout_ref.actor.fsdp_config.fsdp_size=3 must be -1") for p in problems)
    ok = load_config(
        [
            "trainer.n_gpus_per_node=4",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
            "critic.fsdp_config.fsdp_size=2",
            "actor_rollout_ref.actor.fsdp_config.fsdp_size=16",  # >= the world: every rank, as upstream
        ]
    )
    # the reference follows the actor's sequence-parallel size unless set
    assert ok.actor_rollout_ref.ref.ulysses_sequence_parallel_size == 2


def test_sequence_parallel_ranks_share_rows_in_the_batch_arithmetic() -> None:
    # 4 ranks, sp 2: mini-batches split over 2 data-parallel groups: 8 prompts * 4 / 2 = 16 sequences per rank
    base = [
        "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
        "data.train_batch_size=8",
        "actor_rollout_ref.rollout.n=4",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    ]
    load_config([*base, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"])
    (msg,) = _problems([*base, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"])
    assert "larger than the 16 sequences one rank gets" in msg


def test_critic_model_fsdp_config_is_another_name_of_critic_fsdp_config(tmp_path: Path) -> None:
    cfg = load_config(["critic.model.fsdp_config.param_offload=true", "critic.model.fsdp_config.fsdp_size=1"])
    assert cfg.critic.fsdp_config.param_offload is True and cfg.critic.fsdp_config.fsdp_size == 1
    assert "fsdp_config" not in cfg.critic.model
    user = tmp_path / "ppo.yaml"
    user.write_text("critic:\n  model:\n    fsdp_config:\n      optimizer_offload: true\n")
    from_file = load_config([], config_file=str(user))
    assert from_file.critic.fsdp_config.optimizer_offload is True
    assert from_file.critic.fsdp_config.reshard_after_forward is True  # merged, not replaced
    (msg,) = _problems(["critic.model.fsdp_config.param_ofload=true"])
    assert msg.startswith("critic.fsdp_config.param_ofload: unknown key; did you mean critic.fsdp_config.param_offload")


def test_counts_that_must_not_be_negative() -> None:
    problems = _problems(["data.dataloader_num_workers=-1", "trainer.log_val_generations=-2"])
    assert problems == [
        "data.dataloader_num_workers: must be >= 0, got -1",
        "trainer.log_val_generations: must be >= 0, got -2",
    ]


def test_sequence_parallel_multiplies_the_dynamic_token_budget() -> None:
    # a rank holds half of each sequence with sp=2, so 40 tokens per GPU cover a 64-token sequence (verl's rule)
    base = [
        "trainer.n_gpus_per_node=2",
        "algorithm.adv_estimator=grpo",
        "data.max_prompt_length=48",
        "data.max_response_length=16",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40",
    ]
    load_config([*base, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"])
    (msg,) = _problems(base)
    assert msg.startswith("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40 is below one full sequence")


def test_implemented_strategies_are_one_fact_read_by_both_checks() -> None:
    """The strategy list lives below both check modules (no import circle); both still name it, and a reference
    strategy outside it is refused with the list."""
    from verl.trainer.config import parallel_checks, strategies, upstream_keys

    assert parallel_checks.IMPLEMENTED_STRATEGIES is strategies.IMPLEMENTED_STRATEGIES
    assert upstream_keys.IMPLEMENTED_STRATEGIES is strategies.IMPLEMENTED_STRATEGIES
    with pytest.raises(ConfigError, match=r"ref.strategy='ddp'.*fsdp, fsdp2"):
        load_config(["actor_rollout_ref.ref.strategy=ddp"])
