"""PPOTrainer resumes from its own checkpoints: a run stopped after k steps and resumed equals an uninterrupted one."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from verl import CriticModel, DataProvider, PPOTrainer
from verl.api.models import Actor
from verl.checkpoint.layout import COMPLETE_MARKER, find_latest_ckpt_path
from verl.models.tiny import make_tiny_causal_lm

PROMPTS = ["ab", "cd", "ef", "gh", "ij", "kl", "mn", "op"]


def varied_reward(prompts: list[str], responses: list[str]) -> list[float]:
    """Scores that depend on the sampled text and differ within most groups, so the steps move the policy."""
    return [float(sum(map(ord, r)) % 5) + 0.1 * i for i, r in enumerate(responses)]


@pytest.fixture
def prompt_file(tmp_path) -> str:
    path = str(tmp_path / "prompts.parquet")
    pq.write_table(pa.table({"prompt": PROMPTS}), path)
    return path


def _trainer(tok, prompt_file: str, out: str, resume_from: str | None = None, critic: bool = False) -> PPOTrainer:
    torch.manual_seed(0)
    actor = Actor(make_tiny_causal_lm(tokenizer=tok), tok)
    return PPOTrainer(
        actor_model=actor,
        critic_model=CriticModel(make_tiny_causal_lm(tokenizer=tok)) if critic else None,
        tokenizer=tok,
        reward_fn=varied_reward,
        data_provider=DataProvider(prompt_file, batch_size=2),
        resume_from=resume_from,
        config={
            "algorithm": "ppo" if critic else "grpo",
            "batch_size": 2,
            "num_samples": 1 if critic else 2,
            "critic.dtype": "float32",
            "max_new_tokens": 4,
            "lr": 1e-2,
            "kl_controller": {"type": "adaptive", "kl_coef": 0.1, "target_kl": 1e-6, "horizon": 20},
            "actor_rollout_ref.actor.optim.lr_scheduler_type": "cosine",
            "total_steps": 4,
            "actor_rollout_ref.actor.dtype": "float32",
            "actor_rollout_ref.rollout.dtype": "float32",
            "trainer.default_local_dir": out,
        },
    )


KEYS = ("actor/pg_loss", "critic/score/mean", "actor/reward_kl_penalty_coeff", "actor/lr", "actor/grad_norm")
CRITIC_KEYS = ("critic/vf_loss", "critic/values/mean")


@pytest.mark.parametrize("critic", [False, True], ids=["grpo", "ppo-critic"])
def test_resumed_run_equals_uninterrupted_run(byte_tokenizer, prompt_file, tmp_path, critic):
    full = _trainer(byte_tokenizer, prompt_file, str(tmp_path / "full"), critic=critic)
    full_steps = list(full.train(num_steps=4))
    full_weights = {k: v.detach().clone() for k, v in full.actor_model.state_dict().items()}
    full_critic = {k: v.detach().clone() for k, v in full.critic_model.state_dict().items()} if critic else {}
    full.close()

    first = _trainer(byte_tokenizer, prompt_file, str(tmp_path / "parts"), critic=critic)
    list(first.train(num_steps=2))
    ckpt = first.save_checkpoint()  # default place: global_step_2, tracker, completion marker
    first.close()
    assert ckpt.endswith("global_step_2") and find_latest_ckpt_path(str(tmp_path / "parts")) == ckpt
    with open(os.path.join(ckpt, COMPLETE_MARKER)) as f:
        assert json.load(f)["roles"] == (["actor", "critic"] if critic else ["actor"])

    resumed = _trainer(byte_tokenizer, prompt_file, str(tmp_path / "parts"), resume_from=ckpt, critic=critic)
    assert resumed.global_steps == 2 and resumed.data_provider.position == 2
    rest = list(resumed.train(num_steps=2))
    assert [m["step"] for m in rest] == [3, 4]
    for got, want in zip(rest, full_steps[2:]):
        for key in KEYS + (CRITIC_KEYS if critic else ()):
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    for name, tensor in resumed.actor_model.state_dict().items():
        torch.testing.assert_close(tensor, full_weights[name], msg=name)
    for name, tensor in resumed.critic_model.state_dict().items() if critic else ():
        torch.testing.assert_close(tensor, full_critic[name], msg=name)
    # the provider stands exactly where the uninterrupted run's does: all 4 batches of pass 0 served
    expected = {"epoch": 0, "position": 4, "batches_served": 4}
    assert resumed.data_provider.state_dict() == full.data_provider.state_dict() == expected
    resumed.close()


def test_load_checkpoint_latest_explicit_and_refusals(byte_tokenizer, prompt_file, tmp_path):
    trainer = _trainer(byte_tokenizer, prompt_file, str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        trainer.load_checkpoint()
    list(trainer.train(num_steps=1))
    explicit = trainer.save_checkpoint(str(tmp_path / "mine"))
    assert os.path.isfile(os.path.join(explicit, COMPLETE_MARKER))  # an explicit path is marked complete too
    lean = trainer.save_checkpoint(str(tmp_path / "lean"), save_training_state=False)
    list(trainer.train(num_steps=1))
    latest = trainer.save_checkpoint()
    assert trainer.load_checkpoint() == 2 and latest.endswith("global_step_2")
    assert trainer.load_checkpoint(explicit) == 1 and trainer.global_steps == 1
    assert trainer.data_provider.position == 1
    with pytest.raises(FileNotFoundError, match="weights only"):
        trainer.load_checkpoint(lean)
    os.remove(os.path.join(explicit, COMPLETE_MARKER))
    with pytest.raises(ValueError, match="incomplete"):
        trainer.load_checkpoint(explicit)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        trainer.load_checkpoint(str(tmp_path / "nowhere"))
    trainer.close()


def test_train_continues_a_pass_and_starts_the_next_one(byte_tokenizer, prompt_file, tmp_path):
    trainer = _trainer(byte_tokenizer, prompt_file, str(tmp_path / "out"))
    provider = trainer.data_provider
    assert len(list(trainer.train(num_steps=3))) == 3 and provider.position == 3
    # one pass (trainer.total_epochs=1): the rest of pass 0 only
    assert len(list(trainer.train(num_steps=2))) == 1 and provider.state_dict()["epoch"] == 1
    # two passes: pass 1 from its start
    assert len(list(trainer.train(num_steps=1, epochs=2))) == 1
    assert provider.state_dict() == {"epoch": 1, "position": 1, "batches_served": 5}
    list(trainer.train(num_steps=3))  # pass 1 served to its last batch; the provider has not seen its end yet
    assert provider.position == 4 and provider.epoch == 1
    # a pass already served completely is not counted: one more epoch trains a full new pass
    assert len(list(trainer.train(epochs=1))) == 4 and provider.epoch == 3
    trainer.close()
