"""DataParallelPPOActor on a tiny random llama (fp32): log-probs, remove-padding, accumulation, update safety."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from omegaconf import OmegaConf

import verl.trainer.config.experiment_name  # noqa: F401  (registers the YAML's ${verl.experiment_name:...})
from verl.models.tiny import make_tiny_causal_lm
from verl.protocol import DataProto
from verl.workers.actor.dp_actor import DataParallelPPOActor

YAML = os.path.join(os.path.dirname(__file__), "../../../verl/trainer/config/ppo_trainer.yaml")
PROMPT_LEN, RESP_LEN = 6, 5


def actor_config(**overrides):
    cfg = OmegaConf.load(YAML)
    OmegaConf.resolve(cfg)
    actor = cfg.actor_rollout_ref.actor
    actor.dtype = "float32"
    actor.grad_clip = 0.0  # no clipping, so SGD deltas are exactly -lr * grad
    actor.ppo_mini_batch_size = 4
    actor.ppo_micro_batch_size_per_gpu = 4
    for key, value in overrides.items():
        OmegaConf.update(actor, key, value)
    return actor


def make_data(bs: int = 4, seed: int = 0, temperature: float = 1.0) -> DataProto:
    """Left-padded prompts of 2..6 tokens and right-padded responses of 1..5 tokens, random ids."""
    gen = torch.Generator().manual_seed(seed)
    prompt_lens = [PROMPT_LEN, 2, 4, 3, 5, 6, 2, 3][:bs]
    resp_lens = [RESP_LEN, 3, 1, 4, 2, 5, 3, 1][:bs]
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
        "advantages": torch.randn(bs, RESP_LEN, generator=gen),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": temperature, "global_steps": 7})


def manual_response_logprobs(model, data: DataProto, temperature: float):
    """Per row, forward only the valid tokens (no padding at all) and read log_softmax at the response tokens."""
    out_lp = torch.zeros(len(data), RESP_LEN)
    out_ent = torch.zeros(len(data), RESP_LEN)
    b = data.batch
    with torch.no_grad():
        for i in range(len(data)):
            valid = b["attention_mask"][i].bool()
            ids = b["input_ids"][i][valid].unsqueeze(0)
            logits = model(input_ids=ids).logits[0] / temperature
            n_prompt = int(b["attention_mask"][i, :PROMPT_LEN].sum())
            n_resp = int(b["response_mask"][i].sum())
            logp = torch.log_softmax(logits, dim=-1)
            for j in range(n_resp):
                row = logp[n_prompt - 1 + j]
                out_lp[i, j] = row[b["responses"][i, j]]
                out_ent[i, j] = -(row.exp() * row).sum()
    return out_lp, out_ent


@pytest.fixture(scope="module")
def model():
    return make_tiny_causal_lm()


def with_old_log_probs(actor: DataParallelPPOActor, data: DataProto) -> DataProto:
    lp, _ = actor.compute_log_prob(data)
    data.batch["old_log_probs"] = lp
    return data


@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("rmpad", [False, True])
def test_compute_log_prob_matches_manual(model, temperature: float, rmpad: bool) -> None:
    data = make_data(temperature=temperature)
    data.meta_info["micro_batch_size"] = 3
    actor = DataParallelPPOActor(actor_config(), model, use_remove_padding=rmpad)
    lp, ent = actor.compute_log_prob(data, calculate_entropy=True)
    ref_lp, ref_ent = manual_response_logprobs(model, data, temperature)
    mask = data.batch["response_mask"].bool()
    assert lp.shape == (4, RESP_LEN) and ent.shape == (4, RESP_LEN)
    assert torch.allclose(lp[mask], ref_lp[mask], atol=1e-5)
    assert torch.allclose(ent[mask], ref_ent[mask], atol=1e-5)


def test_temperature_changes_log_probs(model) -> None:
    actor = DataParallelPPOActor(actor_config(), model)
    lp1, _ = actor.compute_log_prob(make_data(temperature=1.0))
    lp2, _ = actor.compute_log_prob(make_data(temperature=2.0))
    mask = make_data().batch["response_mask"].bool()
    assert not torch.allclose(lp1[mask], lp2[mask], atol=1e-3)


def test_dynamic_bsz_log_prob_equals_fixed(model) -> None:
    data = make_data(bs=8)
    actor = DataParallelPPOActor(actor_config(), model)
    fixed, _ = actor.compute_log_prob(data)
    data.meta_info.update(use_dynamic_bsz=True, max_token_len=14)
    dyn, _ = actor.compute_log_prob(data)
    mask = data.batch["response_mask"].bool()
    assert torch.allclose(fixed[mask], dyn[mask], atol=1e-6)


def sgd_update(model, data: DataProto, rmpad: bool = False, **overrides):
    """One update with SGD(lr=1) on a copy of ``model``; returns (metrics, {name: -grad}) via the param deltas."""
    module = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    opt = torch.optim.SGD(module.parameters(), lr=1.0)
    actor = DataParallelPPOActor(actor_config(**overrides), module, opt, use_remove_padding=rmpad)
    metrics = actor.update_policy(data)
    deltas = {n: p.detach() - before[n] for n, p in module.named_parameters()}
    return metrics, deltas


def assert_same_deltas(a: dict, b: dict, atol: float = 1e-5) -> None:
    assert any(d.abs().max() > 1e-4 for d in a.values()), "the update changed nothing"
    for name in a:
        assert torch.allclose(a[name], b[name], atol=atol), name


def perturbed_data(model) -> DataProto:
    data = make_data(bs=4)
    actor = DataParallelPPOActor(actor_config(), model)
    data = with_old_log_probs(actor, data)
    # Off-policy by a known shift so the ratio differs from 1 and clipping can engage.
    data.batch["old_log_probs"] = data.batch["old_log_probs"] + 0.1 * torch.randn(4, RESP_LEN)
    return data


def test_remove_padding_update_equals_padded(model) -> None:
    data = perturbed_data(model)
    m_pad, d_pad = sgd_update(model, data, rmpad=False)
    m_rm, d_rm = sgd_update(model, data, rmpad=True)
    assert m_pad["actor/pg_loss"][0] == pytest.approx(m_rm["actor/pg_loss"][0], abs=1e-5)
    assert_same_deltas(d_pad, d_rm)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_micro_batch_accumulation_equals_big_batch(model, loss_agg_mode: str) -> None:
    data = perturbed_data(model)
    m_big, d_big = sgd_update(model, data, loss_agg_mode=loss_agg_mode, ppo_micro_batch_size_per_gpu=4)
    m_small, d_small = sgd_update(model, data, loss_agg_mode=loss_agg_mode, ppo_micro_batch_size_per_gpu=1)
    assert m_big["actor/pg_loss"][0] == pytest.approx(m_small["actor/pg_loss"][0], abs=1e-6)
    assert_same_deltas(d_big, d_small)


def test_dynamic_bsz_update_equals_fixed(model) -> None:
    data = perturbed_data(model)
    _, d_fixed = sgd_update(model, data)
    _, d_dyn = sgd_update(model, data, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=12)
    assert_same_deltas(d_fixed, d_dyn)


def test_gradient_checkpointing_same_update(model) -> None:
    data = perturbed_data(model)
    _, d_plain = sgd_update(model, data)
    ckpt = copy.deepcopy(model)
    ckpt.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ckpt.train()
    _, d_ckpt = sgd_update(ckpt, data)
    assert_same_deltas(d_plain, d_ckpt)


def test_ppo_update_raises_logprob_of_positive_advantage_tokens(model) -> None:
    module = copy.deepcopy(model)
    data = make_data(bs=4)
    mask = data.batch["response_mask"].float()
    adv = torch.zeros(4, RESP_LEN)
    adv[0] = 1.0  # reward every token of row 0 only
    data.batch["advantages"] = adv
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    actor = DataParallelPPOActor(actor_config(ppo_epochs=2), module, opt)
    data = with_old_log_probs(actor, data)
    before = (data.batch["old_log_probs"][0] * mask[0]).sum()
    actor.update_policy(data)
    after_lp, _ = actor.compute_log_prob(data)
    assert (after_lp[0] * mask[0]).sum() > before + 0.05


def test_kl_loss_and_entropy_metrics(model) -> None:
    data = make_data(bs=4)
    config = actor_config(use_kl_loss=True, kl_loss_coef=0.5, calculate_entropy=True)
    actor = DataParallelPPOActor(config, copy.deepcopy(model))
    data = with_old_log_probs(actor, data)
    data.batch["ref_log_prob"] = data.batch["old_log_probs"] - 0.3
    actor.actor_optimizer = torch.optim.SGD(actor.actor_module.parameters(), lr=0.0)
    metrics = actor.update_policy(data)
    # low_var_kl (Schulman's k3) with log r = ref - logp = -0.3 on every valid token: e^-0.3 + 0.3 - 1.
    import math

    assert metrics["actor/kl_loss"][0] == pytest.approx(math.exp(-0.3) + 0.3 - 1, abs=1e-5)
    _, ref_ent = manual_response_logprobs(model, data, 1.0)
    mask = data.batch["response_mask"].bool()
    assert metrics["actor/entropy"][0] == pytest.approx(float(ref_ent[mask].mean()), abs=1e-5)
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower", "actor/grad_norm"):
        assert key in metrics and all(math.isfinite(v) for v in metrics[key])
    assert metrics["actor/lr"] == [0.0] and metrics["actor/grad_norm_nonfinite"] == [0.0]
    assert metrics["actor/ppo_kl"][0] == pytest.approx(0.0, abs=1e-6)  # on-policy: log-probs unchanged


def test_nonfinite_grad_norm_skips_step(model) -> None:
    module = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    opt = torch.optim.SGD(module.parameters(), lr=1.0)
    actor = DataParallelPPOActor(actor_config(), module, opt)
    data = perturbed_data(model)
    param = next(module.parameters())
    handle = param.register_hook(lambda g: g * float("inf"))
    metrics = actor.update_policy(data)
    handle.remove()
    assert metrics["actor/grad_norm_nonfinite"] == [1.0]
    assert not torch.isfinite(torch.tensor(metrics["actor/grad_norm"][0]))
    for n, p in module.named_parameters():
        assert torch.equal(p, before[n]), n
        assert p.grad is None


def test_nan_loss_raises_with_location(model) -> None:
    data = perturbed_data(model)
    data.batch["advantages"][2, 0] = float("nan")
    opt = torch.optim.SGD(copy.deepcopy(model).parameters(), lr=1.0)
    actor = DataParallelPPOActor(actor_config(ppo_micro_batch_size_per_gpu=2), copy.deepcopy(model), opt)
    with pytest.raises(RuntimeError, match=r"global step 7.*mini-batch 0, micro-batch 1"):
        actor.update_policy(data)


def test_bf16_autocast_keeps_fp32_master_weights(model) -> None:
    module = copy.deepcopy(model)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    actor = DataParallelPPOActor(actor_config(dtype="bfloat16"), module, opt)
    data = perturbed_data(model)
    lp, _ = actor.compute_log_prob(data)
    assert lp.dtype == torch.float32
    ref = data.batch["old_log_probs"]
    mask = data.batch["response_mask"].bool()
    assert (lp - ref)[mask].abs().max() < 0.5  # bf16 matmuls: close to fp32, not equal
    metrics = actor.update_policy(data)
    assert all(p.dtype == torch.float32 for p in module.parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in opt.state.values())
    assert metrics["actor/grad_norm_nonfinite"] == [0.0]


class PlainLM(torch.nn.Module):
    """Not a transformers model: forward(input_ids, attention_mask=None) -> logits tensor."""

    def __init__(self, vocab: int = 259) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 16)
        self.head = torch.nn.Linear(16, vocab)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.head(self.emb(input_ids))


def test_plain_module_works() -> None:
    module = PlainLM()
    data = make_data(bs=4)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    actor = DataParallelPPOActor(actor_config(), module, opt)
    lp, _ = actor.compute_log_prob(data)
    # Bigram model: the response token j is scored by the embedding of the token before it.
    ids = data.batch["input_ids"]
    expected = torch.log_softmax(module(ids[:, PROMPT_LEN - 1 : -1]), -1).gather(-1, data.batch["responses"][..., None])
    assert torch.allclose(lp, expected.squeeze(-1), atol=1e-5)
    data.batch["old_log_probs"] = lp
    metrics = actor.update_policy(data)
    assert metrics["actor/grad_norm"][0] > 0


def test_missing_inputs_have_clear_errors(model) -> None:
    actor = DataParallelPPOActor(actor_config(), model)
    data = make_data()
    del data.meta_info["temperature"]
    with pytest.raises(KeyError, match="temperature"):
        actor.compute_log_prob(data)
    data = make_data()
    with pytest.raises(RuntimeError, match="without an optimizer"):
        actor.update_policy(data)
    actor.actor_optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with pytest.raises(KeyError, match="old_log_probs"):
        actor.update_policy(data)


def test_reentrant_checkpointing_with_frozen_embeddings_still_trains_layers(model) -> None:
    """LoRA-like setup: frozen embeddings + reentrant checkpointing must not silently drop layer gradients."""
    module = copy.deepcopy(model)
    module.get_input_embeddings().weight.requires_grad_(False)
    module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    module.train()
    layer_param = module.model.layers[0].mlp.up_proj.weight
    before = layer_param.detach().clone()
    opt = torch.optim.SGD([p for p in module.parameters() if p.requires_grad], lr=1.0)
    actor = DataParallelPPOActor(actor_config(), module, opt)
    actor.update_policy(perturbed_data(model))
    assert (layer_param.detach() - before).abs().max() > 1e-6


def test_the_update_computes_the_entropy_where_the_loss_or_the_metric_needs_it(model, monkeypatch) -> None:
    """``actor.calculate_entropy`` (upstream's key, default false): with an old-log-prob pass (which reports
    actor/entropy) the update runs no entropy at all; it does with the key, with ``entropy_coeff != 0`` (the loss
    needs it) and on an on-policy step without old log-probs (its forward is the step's only one)."""
    import verl.workers.actor.token_scoring as token_scoring

    calls, original = [], token_scoring.entropy_from_logits

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(token_scoring, "entropy_from_logits", counting)  # every entropy goes through there
    with_old = perturbed_data(model)
    on_policy = make_data(bs=4)
    on_policy.meta_info["on_policy"] = True
    cases = [
        (with_old, {}, False),
        (with_old, {"calculate_entropy": True}, True),
        (with_old, {"entropy_coeff": 0.01}, True),
        (on_policy, {}, True),
    ]
    for data, overrides, expected in cases:
        calls.clear()
        metrics, _ = sgd_update(model, data, **overrides)
        assert ("actor/entropy" in metrics) is expected and bool(calls) is expected, overrides
        assert "actor/pg_loss" in metrics


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_every_update_metric_is_the_same_however_the_batch_is_split(model, loss_agg_mode: str) -> None:
    """Metrics are mini-batch values, not micro-batch artefacts: the same batch split three ways (one micro-batch,
    one row each, token-packed) reports the same entropy, losses, clip fractions and KL."""
    data = perturbed_data(model)
    data.batch["ref_log_prob"] = data.batch["old_log_probs"] - 0.05
    common = {"loss_agg_mode": loss_agg_mode, "use_kl_loss": True, "calculate_entropy": True}
    splits = [
        sgd_update(model, data, ppo_micro_batch_size_per_gpu=4, **common)[0],
        sgd_update(model, data, ppo_micro_batch_size_per_gpu=1, **common)[0],
        sgd_update(model, data, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=20, **common)[0],
    ]
    names = set(splits[0]) - {"actor/grad_norm"}  # the norm is a mini-batch value too, but its float sum order differs
    assert {"actor/entropy", "actor/pg_loss", "actor/kl_loss", "actor/pg_clipfrac"} <= names
    for other in splits[1:]:
        assert set(other) == set(splits[0])
        for name in names:
            assert other[name] == pytest.approx(splits[0][name], abs=1e-5), name
    for other in splits[1:]:
        assert other["actor/grad_norm"] == pytest.approx(splits[0]["actor/grad_norm"], rel=1e-4)


@pytest.mark.parametrize("rmpad", [False, True])
def test_sum_pi_squared_matches_the_softmax(model, rmpad: bool) -> None:
    """actor.calculate_sum_pi_squared: the old-log-prob pass also returns sum_v pi(v)^2 of the tempered policy."""
    data = make_data(temperature=0.7)
    actor = DataParallelPPOActor(actor_config(), model, use_remove_padding=rmpad)
    lp, _, sq = actor.compute_log_prob(data, calculate_sum_pi_squared=True)
    b = data.batch
    with torch.no_grad():
        for i in range(len(data)):
            valid = b["attention_mask"][i].bool()
            probs = torch.softmax(model(input_ids=b["input_ids"][i][valid].unsqueeze(0)).logits[0] / 0.7, dim=-1)
            n_prompt = int(b["attention_mask"][i, :PROMPT_LEN].sum())
            for j in range(int(b["response_mask"][i].sum())):
                assert sq[i, j].item() == pytest.approx(probs[n_prompt - 1 + j].square().sum().item(), abs=1e-5)


def test_token_sum_gradient_is_token_count_times_token_mean(model) -> None:
    """token-sum = N * token-mean (N valid tokens of the mini-batch), whatever the micro-batch split."""
    data = perturbed_data(model)
    n_tokens = float(data.batch["response_mask"].sum())
    _, d_mean = sgd_update(model, data, loss_agg_mode="token-mean", ppo_micro_batch_size_per_gpu=4)
    _, d_sum = sgd_update(model, data, loss_agg_mode="token-sum", ppo_micro_batch_size_per_gpu=1)
    assert_same_deltas({n: d * n_tokens for n, d in d_mean.items()}, d_sum, atol=1e-4)


def test_bypass_correction_in_meta_info_switches_to_the_bypass_loss(model) -> None:
    """Bypass mode with loss_type=reinforce and no weights is -A log pi: the same update as loss_mode=gpg."""
    data = perturbed_data(model)
    _, d_gpg = sgd_update(model, data, **{"policy_loss.loss_mode": "gpg"})
    data.meta_info["rollout_correction"] = {"bypass_mode": True, "loss_type": "reinforce", "rollout_is": None}
    metrics, d_bypass = sgd_update(model, data)
    assert_same_deltas(d_gpg, d_bypass)
    assert "rollout_corr/kl" in metrics


def test_log_prob_gap_is_measured_before_the_first_step_and_split_invariant(model) -> None:
    """meta_info['log_prob_gap'] (the driver ran no old-log-prob pass): the rollout-vs-trainer gap is measured on the
    update's own forward while the weights are still those of the rollout's policy (first mini-batch, before its
    optimizer step), equal to the whole-batch mismatch metrics and the same however the batch is split."""
    from verl.algorithms.rollout_correction import compute_mismatch_metrics

    data = perturbed_data(model)
    current, _ = DataParallelPPOActor(actor_config(), model).compute_log_prob(data)
    data.batch["rollout_log_probs"] = current + 0.05 * torch.randn(
        current.shape, generator=torch.Generator().manual_seed(1)
    )
    data.meta_info["log_prob_gap"] = True
    want = compute_mismatch_metrics(current, data.batch["rollout_log_probs"], data.batch["response_mask"])
    splits = [
        sgd_update(model, data, ppo_micro_batch_size_per_gpu=4)[0],
        sgd_update(model, data, ppo_micro_batch_size_per_gpu=1)[0],
        sgd_update(model, data, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=20)[0],
        # two mini-batches, two epochs: only the first mini-batch's forward precedes every optimizer step
        sgd_update(model, data, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1, ppo_epochs=2)[0],
    ]
    for got in splits[:3]:
        for key in ("kl", "k3_kl", "log_prob_abs_diff_mean", "log_prob_abs_diff_max"):
            assert got[f"rollout_corr/{key}"] == [pytest.approx(want[key], rel=1e-4, abs=1e-6)], key
    assert len(splits[3]["rollout_corr/kl"]) == 1 and splits[3]["rollout_corr/log_prob_abs_diff_max"][0] > 0
    plain = sgd_update(model, perturbed_data(model))[0]
    assert not any(k.startswith("rollout_corr/") for k in plain)


def test_data_loader_seed_orders_the_shuffled_mini_batches(model) -> None:
    """With shuffle, the mini-batches of a step are drawn from (data_loader_seed, step, epoch): the same seed repeats
    the update exactly, another seed orders the rows differently (so the second mini-batch starts elsewhere)."""
    data = make_data(bs=8)
    data = with_old_log_probs(DataParallelPPOActor(actor_config(), model), data)
    settings = {"shuffle": True, "ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 2}
    _, first = sgd_update(model, data, data_loader_seed=42, **settings)
    _, again = sgd_update(model, data, data_loader_seed=42, **settings)
    _, other = sgd_update(model, data, data_loader_seed=7, **settings)
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert any(not torch.allclose(first[n], other[n], atol=1e-6) for n in first)
