"""DataParallelPPOCritic on a tiny random llama value model (fp32): alignment, remove-padding, updates."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from omegaconf import OmegaConf
from transformers import LlamaConfig, LlamaForTokenClassification

from verl.protocol import DataProto
from verl.workers.critic.dp_critic import DataParallelPPOCritic

YAML = os.path.join(os.path.dirname(__file__), "../../../verl/trainer/config/ppo_trainer.yaml")
PROMPT_LEN, RESP_LEN = 5, 4


def critic_config(**overrides):
    cfg = OmegaConf.load(YAML)
    OmegaConf.resolve(cfg)
    critic = cfg.critic
    critic.dtype = "float32"
    critic.grad_clip = 0.0
    critic.ppo_mini_batch_size = 4
    critic.ppo_micro_batch_size_per_gpu = 4
    for key, value in overrides.items():
        OmegaConf.update(critic, key, value)
    return critic


@pytest.fixture(scope="module")
def value_model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=259,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        num_labels=1,
        classifier_dropout=0.0,
        pad_token_id=256,
    )
    return LlamaForTokenClassification(config)


def make_data(bs: int = 4, seed: int = 0) -> DataProto:
    gen = torch.Generator().manual_seed(seed)
    prompt_lens, resp_lens = [5, 2, 3, 4][:bs], [4, 2, 1, 3][:bs]
    prompts = torch.full((bs, PROMPT_LEN), 256)
    responses = torch.full((bs, RESP_LEN), 256)
    p_mask = torch.zeros(bs, PROMPT_LEN, dtype=torch.long)
    r_mask = torch.zeros(bs, RESP_LEN, dtype=torch.long)
    for i in range(bs):
        prompts[i, PROMPT_LEN - prompt_lens[i] :] = torch.randint(0, 256, (prompt_lens[i],), generator=gen)
        p_mask[i, PROMPT_LEN - prompt_lens[i] :] = 1
        responses[i, : resp_lens[i]] = torch.randint(0, 256, (resp_lens[i],), generator=gen)
        r_mask[i, : resp_lens[i]] = 1
    attention_mask = torch.cat([p_mask, r_mask], dim=1)
    tensors = {
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "responses": responses,
        "response_mask": r_mask,
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"global_steps": 3, "micro_batch_size": 3})


def manual_values(model, data: DataProto) -> torch.Tensor:
    """Per row, forward the valid tokens only; the value of response token j is the output at the token before."""
    out = torch.zeros(len(data), RESP_LEN)
    b = data.batch
    with torch.no_grad():
        for i in range(len(data)):
            valid = b["attention_mask"][i].bool()
            v = model(input_ids=b["input_ids"][i][valid].unsqueeze(0)).logits[0, :, 0]
            n_prompt = int(b["attention_mask"][i, :PROMPT_LEN].sum())
            for j in range(int(b["response_mask"][i].sum())):
                out[i, j] = v[n_prompt - 1 + j]
    return out


@pytest.mark.parametrize("rmpad", [False, True])
def test_compute_values_alignment_and_mask(value_model, rmpad: bool) -> None:
    data = make_data()
    critic = DataParallelPPOCritic(critic_config(), value_model, use_remove_padding=rmpad)
    values = critic.compute_values(data)
    expected = manual_values(value_model, data)
    assert values.shape == (4, RESP_LEN)
    assert torch.allclose(values, expected, atol=1e-5)  # zero outside the response mask on both sides


def test_dynamic_bsz_values_equal_fixed(value_model) -> None:
    data = make_data()
    critic = DataParallelPPOCritic(critic_config(), value_model)
    fixed = critic.compute_values(data)
    data.meta_info.update(use_dynamic_bsz=True, max_token_len=10)
    assert torch.allclose(critic.compute_values(data), fixed, atol=1e-6)


def with_targets(critic: DataParallelPPOCritic, data: DataProto) -> DataProto:
    data.batch["values"] = critic.compute_values(data)
    data.batch["returns"] = torch.tensor([[1.0, -1.0, 0.5, 2.0]]).expand(len(data), -1).clone()
    return data


def sgd_update(model, data: DataProto, rmpad: bool = False, **overrides):
    module = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    critic = DataParallelPPOCritic(
        critic_config(**overrides), module, torch.optim.SGD(module.parameters(), lr=1.0), use_remove_padding=rmpad
    )
    metrics = critic.update_critic(data)
    return metrics, {n: p.detach() - before[n] for n, p in module.named_parameters()}


def assert_same(a: dict, b: dict) -> None:
    assert any(d.abs().max() > 1e-4 for d in a.values())
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5), name


def test_update_variants_give_same_gradients(value_model) -> None:
    data = with_targets(DataParallelPPOCritic(critic_config(), value_model), make_data())
    m_base, d_base = sgd_update(value_model, data)
    m_micro, d_micro = sgd_update(value_model, data, ppo_micro_batch_size_per_gpu=1)
    m_rm, d_rm = sgd_update(value_model, data, rmpad=True)
    _, d_dyn = sgd_update(value_model, data, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=9)
    assert m_base["critic/vf_loss"][0] == pytest.approx(m_micro["critic/vf_loss"][0], abs=1e-6)
    assert m_base["critic/vf_loss"][0] == pytest.approx(m_rm["critic/vf_loss"][0], abs=1e-5)
    for other in (d_micro, d_rm, d_dyn):
        assert_same(d_base, other)


def test_vf_loss_value_and_metrics(value_model) -> None:
    data = with_targets(DataParallelPPOCritic(critic_config(), value_model), make_data())
    metrics, _ = sgd_update(value_model, data, **{"optim.lr": 0.0})
    mask = data.batch["response_mask"].bool()
    v, r = data.batch["values"][mask], data.batch["returns"][mask]
    # On-policy the clipped and unclipped predictions coincide: 0.5 * mean((V - R)^2), nothing clipped.
    assert metrics["critic/vf_loss"][0] == pytest.approx(float(0.5 * ((v - r) ** 2).mean()), abs=1e-5)
    assert metrics["critic/vf_clipfrac"][0] == pytest.approx(0.0)
    assert metrics["critic/vpred_mean"][0] == pytest.approx(float(v.mean()), abs=1e-5)
    assert metrics["critic/grad_norm"][0] > 0 and metrics["critic/grad_norm_nonfinite"] == [0.0]
    assert "critic/lr" in metrics


def test_update_reduces_value_loss(value_model) -> None:
    module = copy.deepcopy(value_model)
    critic = DataParallelPPOCritic(
        critic_config(ppo_epochs=4, cliprange_value=100.0), module, torch.optim.AdamW(module.parameters(), lr=3e-3)
    )
    data = with_targets(critic, make_data())
    losses = []
    for _ in range(3):
        data.batch["values"] = critic.compute_values(data)
        losses.extend(critic.update_critic(data)["critic/vf_loss"])
    assert losses[-1] < 0.5 * losses[0]


def test_nan_return_raises(value_model) -> None:
    critic = DataParallelPPOCritic(critic_config(ppo_micro_batch_size_per_gpu=2), copy.deepcopy(value_model), None)
    data = with_targets(critic, make_data())
    data.batch["returns"][3, 0] = float("nan")
    critic.critic_optimizer = torch.optim.SGD(critic.critic_module.parameters(), lr=1.0)
    with pytest.raises(RuntimeError, match=r"global step 3.*micro-batch 1"):
        critic.update_critic(data)


def test_nonfinite_grad_skips_step(value_model) -> None:
    module = copy.deepcopy(value_model)
    critic = DataParallelPPOCritic(critic_config(), module, torch.optim.SGD(module.parameters(), lr=1.0))
    data = with_targets(critic, make_data())
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    handle = module.score.weight.register_hook(lambda g: g * float("nan"))
    metrics = critic.update_critic(data)
    handle.remove()
    assert metrics["critic/grad_norm_nonfinite"] == [1.0]
    assert all(torch.equal(p, before[n]) for n, p in module.named_parameters())
