"""LoRA for DPO and KTO: only the adapters train, and the reference is the adapter-disabled base (no copy)."""

from __future__ import annotations

import math
import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl import DPOTrainer, KTOTrainer
from verl.trainer.offline.common import sequence_log_probs

FAST = {"model.dtype": "float32", "trainer.logger": [], "trainer.device": "cpu", "model.lora_rank": 4}
PAIRS = [{"prompt": f"Q{i}: 1+{i}=", "chosen": f"{1 + i}.", "rejected": f"no{i}!"} for i in range(4)]
KTO_ROWS = [
    {"prompt": "a=", "completion": "1", "label": True},
    {"prompt": "b=", "completion": "xx", "label": False},
    {"prompt": "c=", "completion": "3", "label": True},
    {"prompt": "d=", "completion": "yy", "label": False},
]


def _base_logps(model_dir: str, trainer, batch) -> torch.Tensor:
    """Sequence log-probs of ``batch`` under a fresh copy of the untrained base model."""
    base = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return sequence_log_probs(base, batch, trainer.device, torch.float32)


def test_dpo_lora_trains_adapters_against_the_base(tiny_model_dir, tmp_path):
    trainer = DPOTrainer(model=tiny_model_dir, dataset=PAIRS, beta=0.1, max_length=64, config=FAST)
    assert trainer.ref_model is None  # no second model: the base under the adapters is the reference
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    # LoRA's B starts at zero: policy == reference, every implicit reward 0, loss = log 2
    assert trainer.evaluate(PAIRS)["eval/loss"] == pytest.approx(math.log(2), abs=1e-5)
    out = trainer.train(num_train_epochs=6, per_device_train_batch_size=4, learning_rate=5e-2, output_dir=str(tmp_path))
    assert out["global_step"] == 6
    after = trainer.evaluate(PAIRS)
    assert after["eval/loss"] < math.log(2) and after["eval/rewards/margins"] > 0
    for name, p in trainer.model.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name]), name  # the base never moves
    # after training the reference log-probs are still exactly the base model's
    batch = next(trainer._dataset_micro_batches(trainer.train_dataset))[1]
    ref_chosen, ref_rejected = trainer._reference_logps(batch)
    base = _base_logps(tiny_model_dir, trainer, batch)
    n = base.shape[0] // 2
    torch.testing.assert_close(ref_chosen, base[:n])
    torch.testing.assert_close(ref_rejected, base[n:])
    with torch.no_grad():  # while the policy (adapters on) has moved away from it
        policy = sequence_log_probs(trainer.model, batch, trainer.device, torch.float32)
    assert not torch.allclose(policy, base)
    # the export is the merged model: plain transformers weights giving the policy's log-probs
    exported = AutoModelForCausalLM.from_pretrained(os.path.join(str(tmp_path), "hf_model")).eval()
    with torch.no_grad():
        torch.testing.assert_close(sequence_log_probs(exported, batch, trainer.device, torch.float32), policy)


def test_kto_lora_reference_is_the_base_also_when_precomputed(tiny_model_dir, tmp_path):
    trainer = KTOTrainer(model=tiny_model_dir, dataset=KTO_ROWS, beta=0.1, config=FAST)
    assert trainer.ref_model is None
    before = trainer.evaluate(KTO_ROWS)
    assert before["eval/loss"] == pytest.approx(0.5, abs=1e-5) and before["eval/kl"] == pytest.approx(0.0, abs=1e-6)
    trainer.train(num_train_epochs=5, per_device_train_batch_size=4, learning_rate=5e-2, output_dir=str(tmp_path))
    after = trainer.evaluate(KTO_ROWS)
    assert after["eval/loss"] < 0.5 and after["eval/rewards/chosen"] > after["eval/rewards/rejected"]

    # reference log-probs precomputed *after* training still come from the base (adapters disabled)
    trainer._update_config({"ref.precompute_ref_log_probs": True})
    fresh = trainer._make_dataset(KTO_ROWS)
    trainer._ensure_reference(fresh)
    assert fresh.has_reference and trainer.model.training  # the policy is back in training mode
    batch = next(trainer._dataset_micro_batches(fresh))[1]
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        want_logps, want_kl = trainer._reference_pair_logps(base, {k: v for k, v in batch.items() if "ref" not in k})
    torch.testing.assert_close(batch["ref_logps"].float(), want_logps.float())
    torch.testing.assert_close(batch["ref_kl_logps"].float(), want_kl.float())


def test_lora_with_explicit_reference_path_loads_that_model(tiny_model_dir):
    trainer = DPOTrainer(model=tiny_model_dir, dataset=PAIRS, config={**FAST, "ref.path": tiny_model_dir})
    assert trainer.ref_model is not None and not trainer._lora_reference
    with pytest.raises(Exception, match="lora_rank"):
        DPOTrainer(model=tiny_model_dir, dataset=PAIRS, config={**FAST, "model.lora_rank": -1})
