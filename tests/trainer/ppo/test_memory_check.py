"""The start-up memory check (verl/trainer/ppo/memory_check.py): config-level, a SmolLM2-135M-shaped fingerprint,
the available memory given."""

from __future__ import annotations

import re

import pytest

from verl.trainer.config import load_config
from verl.trainer.ppo.memory_check import GIB, MemoryBudgetError, check_ppo_memory, estimate_ppo_memory

SMOLLM2 = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "intermediate_size": 1536,
    "num_parameters": 134_515_008,
}
# the README's "Your own run" as a user shrank it for a CPU: 512-token prompts and responses, micro-batches of 32
OWN_RUN = [
    "data.train_files=~/data/gsm8k/train.parquet",
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.rollout.n=8",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.dtype=float32",
    "trainer.device=cpu",
]


def _identity() -> dict:
    return {"models": {"actor": dict(SMOLLM2)}}


def test_the_readme_run_is_refused_with_the_arithmetic_and_the_key_to_lower() -> None:
    cfg = load_config(OWN_RUN)
    with pytest.raises(MemoryBudgetError) as err:
        check_ppo_memory(cfg, _identity(), available=20 * GIB)
    text = str(err.value)
    assert "\n" not in text and err.value.problems == [text]
    for fragment in (
        "32768 tokens x 30 layers x (10 x 576 + 4 x 1536) x 4 B",  # 32 sequences x (512 + 512)
        "16384 response tokens x 49152 vocab x 4 B x 6",
        "actor 135M params x 16 B",
        "available 20.0 GiB",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 to",
        "trainer.check_memory=false",
    ):
        assert fragment in text, (fragment, text)
    # the value it suggests fits
    fits = int(re.search(r"ppo_micro_batch_size_per_gpu=32 to (\d+) or less", text).group(1))
    assert 1 <= fits < 32
    smaller = load_config([*OWN_RUN, f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={fits}"])
    smaller.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu = fits
    assert check_ppo_memory(smaller, _identity(), available=20 * GIB) is not None


def test_the_estimate_follows_the_measured_peak() -> None:
    """4 x (256 + 256) tokens of SmolLM2-135M in float32 measured 4856 MiB over the loaded model (forward and
    backward of response_logits_forward, gradients included); the update phase plus the gradients is within 10%."""
    cfg = load_config(
        [
            *OWN_RUN,
            "data.max_prompt_length=256",
            "data.max_response_length=256",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        ]
    )
    phases, _, _ = estimate_ppo_memory(cfg, _identity()["models"])
    update = phases[0].total + SMOLLM2["num_parameters"] * 4
    assert update / GIB == pytest.approx(4856 / 1024, rel=0.1)


def test_the_demo_fits_and_the_check_can_be_turned_off() -> None:
    demo = load_config(["trainer.device=cpu"])
    assert "available 8.0 GiB" in check_ppo_memory(demo, _identity(), available=8 * GIB)
    off = load_config([*OWN_RUN, "trainer.check_memory=false"])
    assert check_ppo_memory(off, _identity(), available=1 * GIB) is None
    # gradient checkpointing keeps one tensor per layer: the same run needs far less
    ckpt = load_config([*OWN_RUN, "actor_rollout_ref.model.enable_gradient_checkpointing=true"])
    full = estimate_ppo_memory(load_config(OWN_RUN), _identity()["models"])[0][0]
    assert estimate_ppo_memory(ckpt, _identity()["models"])[0][0].activation_bytes < full.activation_bytes / 5
