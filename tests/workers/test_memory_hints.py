"""An out-of-memory error of a worker pass names the keys that lower that pass's peak, with this run's values."""

from __future__ import annotations

import pytest
import torch

from verl.trainer.config.loader import load_config
from verl.workers import memory_hints
from verl.workers.config import ActorRolloutRefConfig
from verl.workers.fsdp_setup import private_section


def _section(*overrides: str) -> ActorRolloutRefConfig:
    return private_section(load_config(list(overrides)).actor_rollout_ref, ActorRolloutRefConfig)


def test_the_error_keeps_torch_message_first_and_adds_the_keys() -> None:
    with pytest.raises(torch.OutOfMemoryError) as caught:
        with memory_hints.explain_out_of_memory("the actor update", lambda: ["a.b=true: why"]):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 126.00 MiB.")
    text = str(caught.value)
    assert text.startswith("CUDA out of memory. Tried to allocate 126.00 MiB.")  # what callers match stays first
    assert "verl: the actor update ran out of GPU memory" in text and "  - a.b=true: why" in text
    assert isinstance(caught.value.__cause__, torch.OutOfMemoryError)
    with pytest.raises(ValueError):  # other errors pass through untouched
        with memory_hints.explain_out_of_memory("x", lambda: ["never"]):
            raise ValueError("not memory")


def test_update_hints_name_only_what_is_not_already_set() -> None:
    hints = "\n".join(memory_hints.update_hints(_section()))
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=true" in hints
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 (now 32)" in hints
    assert "actor_rollout_ref.model.use_fused_kernels=true" in hints
    assert "actor_rollout_ref.actor.fsdp_config.offload_policy=true" in hints
    done = _section(
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
        "actor_rollout_ref.model.use_fused_kernels=true",
        "actor_rollout_ref.actor.fsdp_config.offload_policy=true",
    )
    assert memory_hints.update_hints(done) == [
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=2048 (now 4096): fewer tokens per forward"
    ]


def test_log_prob_and_generation_hints_follow_their_sections() -> None:
    cfg = _section("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "actor_rollout_ref.rollout.name=hf")
    assert memory_hints.log_prob_hints(cfg, reference=True)[0].startswith(
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 (now 8)"
    )
    assert memory_hints.log_prob_hints(cfg, reference=False)[0].startswith(
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 (now 32)"
    )
    assert memory_hints.generation_hints(cfg)[0].startswith("actor_rollout_ref.rollout.max_num_seqs=128 (now 256)")
    vllm = _section("actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.gpu_memory_utilization=0.8")
    assert memory_hints.generation_hints(vllm)[0].startswith(
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.4 (now 0.8)"
    )


def test_the_worker_update_explains_its_out_of_memory(tiny_model_dir, monkeypatch) -> None:
    from tests.workers.test_fsdp_workers import _actor_group, _scored_batch

    group = _actor_group(tiny_model_dir, "actor")
    actor = group.workers[0].actor

    def out_of_memory(data):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")

    monkeypatch.setattr(actor, "update_policy", out_of_memory)
    with pytest.raises(torch.OutOfMemoryError, match="enable_gradient_checkpointing=true") as caught:
        group.update_actor(_scored_batch())
    assert str(caught.value).startswith("CUDA out of memory. Tried to allocate 2.00 GiB.")
