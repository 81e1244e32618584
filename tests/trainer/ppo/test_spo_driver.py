"""The PPO driver's SPO part (verl/trainer/ppo/spo_driver.py): prompt keys, priority draws, the stored responses and
the discount from the policy's drift, the checkpointed state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.algorithms.config import SPOConfig, SPORhoConfig
from verl.protocol import DataProto
from verl.trainer.ppo.spo_driver import SPODriver, prompt_key

PROMPT, RESPONSE = 5, 4


def _section(rho: dict | None = None, **over) -> SPOConfig:
    return SPOConfig(enable=True, rho=SPORhoConfig(**(rho or {})), **over)


def _rollouts(prompts: list[str], rewards: list[float], lengths: list[tuple[int, int]]) -> DataProto:
    """Rows in the rollout layout: prompts left-padded to PROMPT, responses right-padded to RESPONSE."""
    n = len(prompts)
    ids = torch.zeros(n, PROMPT + RESPONSE, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, r) in enumerate(lengths):
        ids[i, PROMPT - p : PROMPT + r] = torch.arange(1, p + r + 1) + 10 * i
        mask[i, PROMPT - p : PROMPT + r] = 1
    scores = torch.zeros(n, RESPONSE)
    scores[:, 0] = torch.tensor(rewards)
    tensors = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": torch.clamp(mask.cumsum(-1) - 1, min=0),
        "responses": ids[:, PROMPT:],
        "response_mask": mask[:, PROMPT:].clone(),
        "token_level_scores": scores,
    }
    raw = np.empty(n, dtype=object)
    for i, p in enumerate(prompts):
        raw[i] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": f" {p} "}]
    return DataProto.from_dict(tensors=tensors, non_tensors={"raw_prompt": raw})


class _Actor:
    """compute_log_prob stand-in: each response token's log-prob is ``shift - 0.1 * token id`` (a drifting policy
    moves ``shift``); it records the batches it was given."""

    def __init__(self) -> None:
        self.shift, self.calls = 0.0, []

    def compute_log_prob(self, data: DataProto) -> DataProto:
        self.calls.append(data)
        lp = self.shift - 0.1 * data.batch["responses"].float()
        return DataProto.from_dict(tensors={"old_log_probs": lp})


def test_prompt_key_is_the_last_user_message():
    assert prompt_key([{"role": "system", "content": "s"}, {"role": "user", "content": " q \n"}]) == "q"
    assert prompt_key(" plain ") == "plain"
    parts = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is it?"}]}]
    assert prompt_key(parts) == "what is it?"


def test_draws_are_seeded_by_step_and_favour_uncertain_prompts():
    driver = SPODriver(_section(), train_batch_size=20, seed=7, pad_id=0)
    keys = [f"p{i}" for i in range(100)]
    for i, k in enumerate(keys):  # the first half unsure (p_hat 1/2), the second solved (p_hat ~ 1)
        driver.tracker.alpha[k], driver.tracker.beta[k] = (4.0, 4.0) if i < 50 else (8.0, 1e-6)
    batch = _rollouts(keys, [0.0] * 100, [(2, 2)] * 100)
    first, metrics = driver.select(batch, step=3)
    again, _ = driver.select(batch, step=3)
    other, _ = driver.select(batch, step=4)
    picked = [prompt_key(p) for p in first.non_tensor_batch["raw_prompt"]]
    assert len(first) == 20 and len(set(picked)) == 20  # without replacement: the loader batch is larger
    assert picked == [prompt_key(p) for p in again.non_tensor_batch["raw_prompt"]]
    assert picked != [prompt_key(p) for p in other.non_tensor_batch["raw_prompt"]]
    assert sum(int(k[1:]) < 50 for k in picked) >= 16  # weights 0.55 against 0.05
    assert metrics["spo/candidate_prompts"] == 100


def test_a_batch_without_raw_prompts_names_the_key_to_set():
    batch = _rollouts(["a"], [1.0], [(2, 2)])
    batch.non_tensor_batch.pop("raw_prompt")
    with pytest.raises(ValueError, match="data.return_raw_chat=true"):
        SPODriver(_section(), 1, 0, 0).select(batch, 1)


def test_stored_responses_rebuild_to_the_same_tokens():
    driver = SPODriver(_section(), 3, 0, pad_id=0)
    batch = _rollouts(["a", "b", "c"], [1, 0, 1], [(5, 4), (2, 1), (3, 3)])
    rebuilt = driver._rebuild(driver._rows_of(batch, PROMPT, RESPONSE), PROMPT, RESPONSE)
    for key in ("input_ids", "attention_mask", "position_ids", "responses", "response_mask"):
        assert torch.equal(rebuilt.batch[key], batch.batch[key]), key


def test_constant_discount_updates_the_tracker():
    driver = SPODriver(_section(rho={"type": "constant", "value": 0.5}), 2, 0, 0)
    batch = _rollouts(["a", "b"], [1.0, 0.0], [(2, 2), (2, 2)])
    metrics = driver.attach_values(batch)
    assert batch.batch["spo_values"].tolist() == [0.5, 0.5] and metrics["spo/p_hats"] == 0.5
    actor = _Actor()
    driver.observe(batch, actor)
    assert not actor.calls  # no log-prob pass for a constant discount
    assert driver.tracker.posterior(["a", "b"])[0] == pytest.approx([0.25 + 1.0, 0.25])


def test_kl_discount_from_the_previous_response_under_the_updated_policy():
    driver = SPODriver(_section(), 2, 0, 0)
    actor = _Actor()
    step1 = _rollouts(["a", "b"], [1.0, 0.0], [(2, 2), (3, 1)])
    m1 = driver.observe(step1, actor)
    # first visit: D = 0, rho = 0.96; the responses stored with their log-probs under the updated actor
    assert m1["spo/first_sampled_ratio"] == 1.0 and m1["spo/rho_clipped"] == pytest.approx(0.96)
    assert driver.tracker.posterior(["a"])[0][0] == pytest.approx(0.96 * 0.5 + 1.0)
    assert len(actor.calls) == 1
    stored = driver.past["a"]
    assert stored.log_probs.tolist() == pytest.approx((-0.1 * stored.response_ids.float()).tolist())
    # the policy moves by 0.005 per token: D = 0.005, rho = 2 ** (-0.005 / 0.06), between floor and ceiling
    actor.shift = -0.005
    alpha_a = driver.tracker.posterior(["a"])[0][0]
    step2 = _rollouts(["a", "new"], [0.0, 1.0], [(2, 1), (2, 2)])
    m2 = driver.observe(step2, actor)
    assert m2["spo/first_sampled_ratio"] == 0.5
    replayed = actor.calls[1]  # row 0: a's step-1 response; row 1: new's own
    assert torch.equal(replayed.batch["responses"][0], step1.batch["responses"][0])
    assert m2["spo/D"] == pytest.approx(0.005 / 2)  # the mean over a (0.005) and new (first visit: 0)
    assert driver.tracker.posterior(["a"])[0][0] == pytest.approx(2 ** (-0.005 / 0.06) * alpha_a + 0.0)
    assert driver.tracker.visits["a"] == 2 and m2["spo/cur_sampled_number/max"] == 2


def test_state_round_trips_through_a_checkpoint(tmp_path):
    driver = SPODriver(_section(), 2, 0, 0)
    driver.observe(_rollouts(["a", "b"], [1.0, 0.0], [(2, 2), (3, 1)]), _Actor())
    torch.save(driver.state_dict(), tmp_path / "data.pt")
    restored = SPODriver(_section(), 2, 0, 0)
    restored.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=True))
    assert restored.tracker.state_dict() == driver.tracker.state_dict()
    for key in ("a", "b"):
        for field in ("prompt_ids", "response_ids", "response_mask", "log_probs"):
            assert torch.equal(getattr(restored.past[key], field), getattr(driver.past[key], field))


def test_offline_values_set_the_prior_and_unknown_prompts_start_at_one_half(tmp_path):
    path = tmp_path / "offline.json"
    path.write_text('{"a": [1, 1, 1, 0, 1, 1, 1, 1]}')
    driver = SPODriver(_section(offline_values=str(path)), 2, 0, 0)
    batch = _rollouts(["a", "zzz"], [1.0, 0.0], [(2, 2), (2, 2)])
    driver.attach_values(batch)
    assert batch.batch["spo_values"].tolist() == pytest.approx([7.5 / 9, 0.5])
