"""SFTTrainer: the loss covers the response tokens only (checked against a manual computation) and it learns."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.trainer.offline import SFTTrainer

ROWS = [{"prompt": "Say hi:", "response": "hi"}, {"prompt": "Count:", "response": "123"}]


def test_sft_loss_is_masked_cross_entropy(tiny_model_dir, fast) -> None:
    trainer = SFTTrainer(model=tiny_model_dir, dataset=ROWS, max_length=64, config=fast)
    ev = trainer.evaluate(ROWS)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    total, count = 0.0, 0
    for row in ROWS:
        prompt = list(row["prompt"].encode())
        response = list(row["response"].encode()) + [258]  # + <eos>
        ids = prompt + response
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)
        # Only response tokens are targets: positions len(prompt) .. len(ids) - 1, predicted one step earlier.
        for t in range(len(prompt), len(ids)):
            total -= lp[t - 1, ids[t]].item()
            count += 1
    assert ev["eval/loss"] == pytest.approx(total / count, rel=1e-5)
    assert ev["eval/response_length"] == pytest.approx((3 + 4) / 2)


def test_sft_learns_and_exports(tiny_model_dir, fast, tmp_path) -> None:
    trainer = SFTTrainer(model=tiny_model_dir, dataset=ROWS, eval_dataset=ROWS, config=fast)
    before = trainer.evaluate()["eval/loss"]
    out = trainer.train(
        num_train_epochs=10, per_device_train_batch_size=2, learning_rate=3e-3, output_dir=str(tmp_path)
    )
    assert out["eval/loss"] < before - 1.0
    assert os.path.isdir(os.path.join(str(tmp_path), "hf_model"))


def test_sft_accepts_a_module_and_tokenizer(tiny_model_dir, byte_tokenizer, fast, tmp_path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    trainer = SFTTrainer(model=model, tokenizer=byte_tokenizer, dataset=ROWS, config=fast)
    trainer.train(per_device_train_batch_size=1, learning_rate=1e-3, output_dir=str(tmp_path), max_steps=1)
    assert trainer.model is model
    assert os.path.isfile(os.path.join(str(tmp_path), "global_step_1", "actor", "huggingface", "config.json"))
