"""KTOTrainer on a tiny model: it trains, logs its metrics, and its numbers agree with a manual computation."""

from __future__ import annotations

import math
import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.trainer.offline import KTOTrainer


def test_kto_trains_and_logs_metrics(tiny_model_dir, kto_rows, fast, jsonl, tmp_path) -> None:
    trainer = KTOTrainer(model=tiny_model_dir, dataset=kto_rows, beta=0.1, desirable_weight=1.0, config=fast)
    before = trainer.evaluate(kto_rows)
    # Policy == reference: every reward is 0, z0 = 0, so each loss is 1 - sigmoid(0) = 0.5.
    assert before["eval/loss"] == pytest.approx(0.5, abs=1e-5)
    assert before["eval/kl"] == pytest.approx(0.0, abs=1e-5)
    out = trainer.train(num_train_epochs=5, per_device_train_batch_size=4, learning_rate=2e-3, output_dir=str(tmp_path))
    assert out["global_step"] == 5
    after = trainer.evaluate(kto_rows)
    assert after["eval/loss"] < 0.5
    assert after["eval/rewards/margins"] > 0
    assert after["eval/rewards/chosen"] > after["eval/rewards/rejected"]
    records = jsonl(os.path.join(str(tmp_path), "logs", "metrics.jsonl"))
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    for name in ("loss", "kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"):
        assert name in records[-1]["metrics"], name
    assert os.path.isfile(os.path.join(str(tmp_path), "hf_model", "config.json"))


def test_kto_loss_in_trainer_matches_manual(tiny_model_dir, kto_rows, fast) -> None:
    """With reference columns, the trainer's loss is the paper's formula on independently computed log-probs."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    rows = [dict(r, ref_logps=-20.0, ref_kl_logps=-25.0) for r in kto_rows]
    trainer = KTOTrainer(model=tiny_model_dir, dataset=rows, beta=0.2, undesirable_weight=2.0, config=fast)
    assert trainer.ref_model is None
    ev = trainer.evaluate(rows)

    def seq_logp(ids: list[int], mask: list[int]) -> float:
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)
        return sum(lp[t - 1, ids[t]].item() for t in range(1, len(ids)) if mask[t])

    items = trainer.train_dataset.items
    # One micro-batch of 2 rows at a time (micro_batch_size_per_gpu=2): z0 is estimated per micro-batch.
    losses = []
    for start in (0, 2):
        part = items[start : start + 2]
        kl = [seq_logp(it["kl_input_ids"], it["kl_loss_mask"]) + 25.0 for it in part]
        z0 = max(0.0, sum(kl) / 2)
        for it in part:
            r = seq_logp(it["input_ids"], it["loss_mask"]) + 20.0
            if it["label"]:
                losses.append(1 - 1 / (1 + math.exp(-0.2 * (r - z0))))
            else:
                losses.append(2.0 * (1 - 1 / (1 + math.exp(-0.2 * (z0 - r)))))
    assert ev["eval/loss"] == pytest.approx(sum(losses) / 4, rel=1e-4)
