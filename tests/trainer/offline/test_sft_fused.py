"""``model.use_fused_kernels`` of the SFT trainer: the loss through the chunked LM head (fused_head.py) equals the
plain logits path, loss and gradients, and a head it cannot handle is refused in one line naming the key;
``model.use_remove_padding``: packed micro-batches give the padded loss and gradients."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.trainer.offline import SFTTrainer

# rows of different lengths: the batch is right-padded, so masking and the dropped last position are exercised
ROWS = [{"prompt": "Say hi:", "response": "hi there"}, {"prompt": "Count to three:", "response": "123"}]


def _loss_and_grads(model_dir: str, fast: dict, fused: bool, **extra) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)  # the same LoRA initialisation in both trainers
    config = {**fast, "model.use_fused_kernels": fused, **extra}
    trainer = SFTTrainer(model=model_dir, dataset=ROWS, max_length=64, config=config)
    ds = trainer.train_dataset
    batch = trainer._collate([ds[i] for i in range(len(ds))], ds)
    assert bool((batch["attention_mask"] == 0).any())  # padded
    out = trainer._compute_loss(batch)
    out.loss_sum.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return out.loss_sum.detach(), grads


@pytest.mark.parametrize(
    "model_fixture, extra",
    [("tiny_model_dir", {}), ("tiny_qwen2_dir", {}), ("tiny_model_dir", {"model.lora_rank": 4})],
    ids=["llama", "qwen2-tied", "llama-lora"],
)
def test_fused_sft_loss_and_gradients_equal_the_logits_path(model_fixture, extra, fast, request) -> None:
    model_dir = request.getfixturevalue(model_fixture)
    plain_loss, plain_grads = _loss_and_grads(model_dir, fast, False, **extra)
    fused_loss, fused_grads = _loss_and_grads(model_dir, fast, True, **extra)
    torch.testing.assert_close(fused_loss, plain_loss, rtol=1e-6, atol=1e-6)
    assert plain_grads.keys() == fused_grads.keys() and plain_grads
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("fused", [False, True])
def test_packed_sft_loss_and_gradients_equal_the_padded_ones(fused: bool, tiny_model_dir, fast) -> None:
    """``model.use_remove_padding``: the micro-batch packed into rows (sdpa/eager) or one row, or padded."""
    padded_loss, padded_grads = _loss_and_grads(tiny_model_dir, fast, fused, **{"model.use_remove_padding": False})
    packed_loss, packed_grads = _loss_and_grads(tiny_model_dir, fast, fused, **{"model.use_remove_padding": True})
    torch.testing.assert_close(packed_loss, padded_loss, rtol=1e-5, atol=1e-5)
    assert packed_grads.keys() == padded_grads.keys() and padded_grads
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_sft_remove_padding_auto_packs_a_transformers_text_model(tiny_model_dir, fast) -> None:
    assert SFTTrainer(model=tiny_model_dir, dataset=ROWS, max_length=64, config=fast).use_remove_padding is True
    config = {**fast, "model.use_remove_padding": False}
    assert SFTTrainer(model=tiny_model_dir, dataset=ROWS, max_length=64, config=config).use_remove_padding is False


def test_fused_path_skips_the_full_logits(tiny_model_dir, fast) -> None:
    """The head's matmul over the whole vocabulary never runs: nothing of ``[batch, seq, vocab]`` leaves the head,
    and it runs at the positions that predict a loss token only."""
    trainer = SFTTrainer(
        model=tiny_model_dir, dataset=ROWS, max_length=64, config={**fast, "model.use_fused_kernels": True}
    )
    seen: list[tuple[int, ...]] = []
    handle = trainer.model.get_output_embeddings().register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape)))
    ds = trainer.train_dataset
    batch = trainer._collate([ds[i] for i in range(len(ds))], ds)
    try:
        trainer._compute_loss(batch)
    finally:
        handle.remove()
    assert seen == [(1, int(batch["loss_mask"][:, 1:].sum()), 1)]  # one log-prob per loss token


@pytest.mark.parametrize(
    "setup, extra, why",
    [
        ("softcap", {}, "final_logit_softcapping=30.0"),
        ("none", {"model.lora_rank": 4, "model.target_modules": ["q_proj", "lm_head"]}, "carries LoRA adapters"),
    ],
)
def test_unhandled_head_is_refused_naming_the_key(setup, extra, why, tiny_model_dir, byte_tokenizer, fast) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    if setup == "softcap":
        model.config.final_logit_softcapping = 30.0  # logits post-processed after the head (as Gemma-2)
    config = {**fast, "model.use_fused_kernels": True, **extra}
    with pytest.raises(ValueError) as err:
        SFTTrainer(model=model, tokenizer=byte_tokenizer, dataset=ROWS, max_length=64, config=config)
    message = str(err.value)
    assert message.startswith("model.use_fused_kernels=true") and why in message and "\n" not in message
