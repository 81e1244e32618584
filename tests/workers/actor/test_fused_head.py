"""``model.use_fused_kernels``: the actor's log-probs, entropies and updates through the chunked LM head equal the
plain path's (logits materialised), padded and packed, with temperature, entropy bonus, tied embeddings, LoRA and
bf16 autocast; the head's own matmul never runs; models it cannot serve are refused naming the key."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.workers.actor.test_dp_actor import PlainLM, actor_config, make_data, with_old_log_probs
from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
from verl.workers.actor.dp_actor import DataParallelPPOActor


@pytest.fixture(scope="module")
def model():
    return make_tiny_causal_lm()


@pytest.fixture(scope="module")
def tied():
    return make_tiny_causal_lm(TinyModelSpec(arch="qwen2", tie_word_embeddings=True), seed=1)


def _pair(module, rmpad: bool = False, **overrides):
    plain = DataParallelPPOActor(actor_config(**overrides), module, use_remove_padding=rmpad)
    fused = DataParallelPPOActor(actor_config(**overrides), module, use_remove_padding=rmpad, use_fused_kernels=True)
    return plain, fused


@pytest.mark.parametrize("rmpad", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_compute_log_prob_equals_plain(model, rmpad: bool, temperature: float) -> None:
    data = make_data(bs=4, temperature=temperature)
    data.meta_info["micro_batch_size"] = 3
    plain, fused = _pair(model, rmpad)
    want = plain.compute_log_prob(data, calculate_entropy=True, calculate_sum_pi_squared=True)
    got = fused.compute_log_prob(data, calculate_entropy=True, calculate_sum_pi_squared=True)
    mask = data.batch["response_mask"].bool()
    for g, w in zip(got, want):
        torch.testing.assert_close(g[mask], w[mask], atol=1e-5, rtol=1e-5)


def _update(module, data, fused: bool, rmpad: bool = False, **overrides):
    module = copy.deepcopy(module)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    opt = torch.optim.SGD([p for p in module.parameters() if p.requires_grad], lr=1.0)
    actor = DataParallelPPOActor(
        actor_config(calculate_entropy=True, **overrides),
        module,
        opt,
        use_remove_padding=rmpad,
        use_fused_kernels=fused,
    )
    metrics = actor.update_policy(data)
    return metrics, {n: p.detach() - before[n] for n, p in module.named_parameters()}


def _assert_same_update(a, b, atol=1e-5) -> None:
    (ma, da), (mb, db) = a, b
    assert any(d.abs().max() > 1e-4 for d in da.values()), "the update changed nothing"
    for name in da:
        torch.testing.assert_close(da[name], db[name], atol=atol, rtol=1e-4, msg=name)
    for key in ("actor/pg_loss", "actor/entropy"):
        assert ma[key] == pytest.approx(mb[key], abs=1e-5)


@pytest.mark.parametrize("rmpad", [False, True])
def test_update_with_entropy_bonus_and_temperature_equals_plain(model, rmpad: bool) -> None:
    data = with_old_log_probs(DataParallelPPOActor(actor_config(), model), make_data(bs=4, temperature=0.8))
    data.batch["old_log_probs"] += 0.1 * torch.randn(data.batch["old_log_probs"].shape)
    overrides = {"entropy_coeff": 0.05, "ppo_micro_batch_size_per_gpu": 2}
    _assert_same_update(_update(model, data, True, rmpad, **overrides), _update(model, data, False, rmpad, **overrides))


def test_tied_embeddings_update_equals_plain(tied) -> None:
    assert tied.get_output_embeddings().weight is tied.get_input_embeddings().weight
    data = with_old_log_probs(DataParallelPPOActor(actor_config(), tied), make_data(bs=4))
    overrides = {"entropy_coeff": 0.1}
    _assert_same_update(_update(tied, data, True, **overrides), _update(tied, data, False, **overrides))


def test_lora_model_equals_plain(model) -> None:
    pytest.importorskip("peft")
    from verl.models.lora import apply_lora

    lora = apply_lora(copy.deepcopy(model), 4, 8, "all-linear")
    with torch.no_grad():  # non-zero B so the adapters change the forward
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    data = with_old_log_probs(DataParallelPPOActor(actor_config(), lora), make_data(bs=4))
    _assert_same_update(_update(lora, data, True), _update(lora, data, False))


def test_lora_on_the_head_is_refused(model) -> None:
    pytest.importorskip("peft")
    from verl.models.lora import apply_lora

    lora = apply_lora(copy.deepcopy(model), 4, 8, ["q_proj", "lm_head"])
    with pytest.raises(ValueError, match="use_fused_kernels.*LoRA"):
        DataParallelPPOActor(actor_config(), lora, use_fused_kernels=True)


def test_the_head_matmul_never_runs(model) -> None:
    """The class forward of the LM head fails if called: the fused path computes the head itself, in chunks."""
    module = copy.deepcopy(model)
    head = module.get_output_embeddings()

    def refuse(self, x):
        raise AssertionError(f"LM head ran on {tuple(x.shape)}")

    data = make_data(bs=4)
    plain = DataParallelPPOActor(actor_config(), module).compute_log_prob(data, calculate_entropy=True)
    head.__class__ = type("GuardedHead", (type(head),), {"forward": refuse})
    fused = DataParallelPPOActor(actor_config(), module, use_fused_kernels=True)
    got = fused.compute_log_prob(data, calculate_entropy=True)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(got[0][mask], plain[0][mask], atol=1e-5, rtol=1e-5)
    assert "forward" not in module.get_output_embeddings().__dict__  # the replacement is undone


def test_bf16_autocast_close_to_plain(model) -> None:
    data = with_old_log_probs(DataParallelPPOActor(actor_config(), model), make_data(bs=4))
    plain, fused = _pair(model, dtype="bfloat16")
    lp_plain, _ = plain.compute_log_prob(data)
    lp_fused, _ = fused.compute_log_prob(data)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(lp_fused[mask], lp_plain[mask], atol=2e-2, rtol=2e-2)
    a = _update(model, data, True, dtype="bfloat16")
    b = _update(model, data, False, dtype="bfloat16")
    for name in a[1]:
        torch.testing.assert_close(a[1][name], b[1][name], atol=2e-2, rtol=5e-2, msg=name)


def test_a_model_without_an_lm_head_is_refused() -> None:
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.model\.use_fused_kernels=true needs"):
        DataParallelPPOActor(actor_config(), PlainLM(), use_fused_kernels=True)


def test_soft_capped_logits_are_refused(model) -> None:
    module = copy.deepcopy(model)
    module.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping=30.0"):
        DataParallelPPOActor(actor_config(), module, use_fused_kernels=True)
