"""``model.use_remove_padding`` of the offline trainers: each micro-batch's valid tokens packed give the padded
losses and gradients (SFT, DPO, KTO, GKD), and null packs a transformers text model."""

from __future__ import annotations

import pytest
import torch

from verl.trainer.offline import DPOTrainer, KTOTrainer, SFTTrainer
from verl.trainer.offline.gkd import GKDTrainer

SFT_ROWS = [{"prompt": "Say hi:", "response": "hi there"}, {"prompt": "Count to three:", "response": "123"}]


def _trainer(kind: str, model_dir: str, config: dict, pref_rows, kto_rows, byte_tokenizer):
    torch.manual_seed(0)
    if kind == "sft":
        return SFTTrainer(model=model_dir, dataset=SFT_ROWS, max_length=64, config=config)
    if kind == "dpo":
        return DPOTrainer(model=model_dir, dataset=pref_rows, beta=0.1, max_length=64, config=config)
    if kind == "kto":
        return KTOTrainer(model=model_dir, dataset=kto_rows, beta=0.1, config=config)
    from tests.trainer.offline.test_gkd import BigramTeacher

    teacher = BigramTeacher()
    return GKDTrainer(model_dir, teacher=teacher, tokenizer=byte_tokenizer, dataset=SFT_ROWS, config=config)


def _loss_and_grads(trainer) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ds = trainer.train_dataset
    items = [ds[i] for i in range(len(ds))]
    (batch,) = trainer._micro_batches(items, ds)[:1]
    assert bool((batch["attention_mask"] == 0).any())  # padded rows
    if hasattr(trainer, "_ensure_reference"):
        trainer._ensure_reference(ds)
    out = trainer._compute_loss(batch)
    out.loss_sum.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return out.loss_sum.detach(), grads


@pytest.mark.parametrize("kind", ["sft", "dpo", "kto", "gkd"])
def test_packed_losses_and_gradients_equal_the_padded_ones(
    kind: str, tiny_model_dir, fast, pref_rows, kto_rows, byte_tokenizer
) -> None:
    config = {**fast, "data.micro_batch_size_per_gpu": 8, "data.train_batch_size": 8}
    padded = _trainer(kind, tiny_model_dir, {**config, "model.use_remove_padding": False}, pref_rows, kto_rows,
                      byte_tokenizer)  # fmt: skip
    packed = _trainer(kind, tiny_model_dir, {**config, "model.use_remove_padding": True}, pref_rows, kto_rows,
                      byte_tokenizer)  # fmt: skip
    assert (padded.use_remove_padding, packed.use_remove_padding) == (False, True)
    padded_loss, padded_grads = _loss_and_grads(padded)
    packed_loss, packed_grads = _loss_and_grads(packed)
    torch.testing.assert_close(packed_loss, padded_loss, rtol=1e-5, atol=1e-5)
    assert packed_grads.keys() == padded_grads.keys() and padded_grads
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_null_packs_a_transformers_text_model(tiny_model_dir, fast, pref_rows) -> None:
    assert DPOTrainer(model=tiny_model_dir, dataset=pref_rows, config=fast).use_remove_padding is True
