"""DPOTrainer end to end on a tiny model: learning, the issue's Python API, checkpoints, export, resume, reference."""

from __future__ import annotations

import os

import datasets
import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.trainer.offline import DPOTrainer

METRICS = ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins")


def test_dpo_steps_raise_margins_and_accuracy(tiny_model_dir, pref_rows, fast, tmp_path) -> None:
    trainer = DPOTrainer(model=tiny_model_dir, dataset=pref_rows, beta=0.1, max_length=64, config=fast)
    before = trainer.evaluate(pref_rows)
    # The policy starts equal to the reference: every implicit reward is 0, so the loss is log 2.
    assert before["eval/rewards/margins"] == pytest.approx(0.0, abs=1e-5)
    assert before["eval/loss"] == pytest.approx(0.693147, abs=1e-4)
    out = trainer.train(num_train_epochs=4, per_device_train_batch_size=2, learning_rate=2e-3, output_dir=str(tmp_path))
    after = trainer.evaluate(pref_rows)
    assert out["global_step"] == 8
    assert after["eval/rewards/margins"] > 0.5
    assert after["eval/rewards/accuracies"] == 1.0
    assert after["eval/loss"] < 0.5


def test_python_api_with_datasets_dataset_writes_checkpoint_and_export(
    tiny_model_dir, pref_rows, fast, jsonl, tmp_path
) -> None:
    ds = datasets.Dataset.from_list(pref_rows)
    out_dir = str(tmp_path / "run")
    trainer = DPOTrainer(model=tiny_model_dir, tokenizer=None, dataset=ds, beta=0.1, max_length=1024, config=fast)
    metrics = trainer.train(num_train_epochs=1, per_device_train_batch_size=2, learning_rate=1e-3, output_dir=out_dir)
    for name in METRICS:
        assert name in metrics
    step_dir = os.path.join(out_dir, "global_step_2", "actor")
    assert os.path.isfile(os.path.join(step_dir, "huggingface", "config.json"))
    assert os.path.isfile(os.path.join(step_dir, "optim_world_size_1_rank_0.safetensors"))
    with open(os.path.join(out_dir, "latest_checkpointed_iteration.txt")) as f:
        assert f.read().strip() == "2"
    exported = AutoModelForCausalLM.from_pretrained(os.path.join(out_dir, "hf_model"))
    for (name, p), q in zip(trainer.model.named_parameters(), exported.parameters()):
        assert torch.equal(p.detach().cpu(), q), name
    assert os.path.isfile(os.path.join(out_dir, "hf_model", "tokenizer_config.json"))
    records = jsonl(os.path.join(out_dir, "logs", "metrics.jsonl"))
    assert [r["step"] for r in records] == [1, 2]
    for name in (*METRICS, "logps/chosen", "logps/rejected", "grad_norm", "lr"):
        assert name in records[-1]["metrics"], name


def test_gradient_accumulation_matches_one_big_batch(tiny_model_dir, pref_rows, fast, tmp_path) -> None:
    # Adam is blind to the gradient's scale, so compare the accumulated gradients of one step (and their norm).
    grads, norms = [], []
    for per_device, accum in ((4, 1), (1, 4)):
        t = DPOTrainer(model=tiny_model_dir, dataset=pref_rows, config={**fast, "optim.clip_grad": 1.0e6})
        out = t.train(
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=accum,
            learning_rate=1e-3,
            output_dir=str(tmp_path / f"r{per_device}"),
            max_steps=1,
        )
        grads.append([p.grad.detach().clone() for p in t.model.parameters()])
        norms.append(out["grad_norm"])
    assert norms[0] == pytest.approx(norms[1], rel=1e-5)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_resume_and_namespace(tiny_model_dir, pref_rows, fast, jsonl, tmp_path) -> None:
    out_dir = str(tmp_path)
    first = DPOTrainer(model=tiny_model_dir, dataset=pref_rows, namespace="exp1", config=fast)
    first.train(per_device_train_batch_size=1, learning_rate=1e-3, output_dir=out_dir, max_steps=2, save_steps=1)
    root = os.path.join(out_dir, "exp1")
    assert sorted(n for n in os.listdir(root) if n.startswith("global_step_")) == ["global_step_1", "global_step_2"]
    second = DPOTrainer(model=tiny_model_dir, dataset=pref_rows, namespace="exp1", config=fast)
    out = second.train(
        per_device_train_batch_size=1, learning_rate=1e-3, output_dir=out_dir, max_steps=3, resume_from_checkpoint=True
    )
    assert out["global_step"] == 3
    # The resumed run appended only step 3 to the same log.
    assert [r["step"] for r in jsonl(os.path.join(root, "logs", "metrics.jsonl"))] == [1, 2, 3]
    # max_ckpt_to_keep=2 keeps the two newest checkpoints.
    assert sorted(n for n in os.listdir(root) if n.startswith("global_step_")) == ["global_step_2", "global_step_3"]


def _manual_seq_logp(model: torch.nn.Module, ids: list[int], mask: list[int]) -> float:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    return sum(lp[t - 1, ids[t]].item() for t in range(1, len(ids)) if mask[t])


def test_precomputed_reference_needs_no_reference_model(tiny_model_dir, pref_rows, fast, tmp_path) -> None:
    trainer = DPOTrainer(model=tiny_model_dir, dataset=pref_rows, precompute_ref_log_probs=True, config=fast)
    assert trainer.ref_model is None
    item = trainer.train_dataset[0]
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    trainer.train(per_device_train_batch_size=2, learning_rate=1e-3, output_dir=str(tmp_path), max_steps=1)
    assert trainer.ref_model is None
    expected = _manual_seq_logp(reference, item["chosen_input_ids"], item["chosen_loss_mask"])
    assert item["ref_chosen_logps"] == pytest.approx(expected, rel=1e-4)

    # Reference columns given in the data: no reference model either, and the rewards use those numbers.
    rows = [dict(r, ref_chosen_logps=-1.0, ref_rejected_logps=-1.0) for r in pref_rows]
    with_cols = DPOTrainer(model=tiny_model_dir, dataset=rows, config=fast)
    assert with_cols.ref_model is None
    ev = with_cols.evaluate(rows)
    policy = [
        _manual_seq_logp(reference, it["chosen_input_ids"], it["chosen_loss_mask"]) for it in with_cols.train_dataset
    ]
    # reward = beta * (policy log-prob - reference column), averaged over the pairs
    assert ev["eval/rewards/chosen"] == pytest.approx(0.1 * (sum(policy) / 4 + 1.0), rel=1e-4)


@pytest.mark.parametrize("loss_type", ["ipo", "hinge"])
def test_other_loss_types_train(tiny_model_dir, pref_rows, fast, tmp_path, loss_type) -> None:
    trainer = DPOTrainer(model=tiny_model_dir, dataset=pref_rows, loss_type=loss_type, beta=0.5, config=fast)
    out = trainer.train(per_device_train_batch_size=4, learning_rate=2e-3, output_dir=str(tmp_path), max_steps=4)
    assert out["rewards/margins"] > 0


def test_bad_arguments_are_named(tiny_model_dir, pref_rows, fast) -> None:
    with pytest.raises(ValueError, match="loss_type"):
        DPOTrainer(model=tiny_model_dir, dataset=pref_rows, loss_type="nope", config=fast)
    with pytest.raises(ValueError, match="beta: must be > 0"):
        DPOTrainer(model=tiny_model_dir, dataset=pref_rows, beta=0.0, config=fast)
    with pytest.raises(ValueError, match=r"row 2: missing field 'prompt'"):
        DPOTrainer(model=tiny_model_dir, dataset=pref_rows[:2] + [{"chosen": "a", "rejected": "b"}], config=fast)


def test_public_api_reexports() -> None:
    import verl
    from verl.api.offline import KTOTrainer, SFTTrainer

    assert verl.DPOTrainer is DPOTrainer
    assert verl.KTOTrainer is KTOTrainer and verl.SFTTrainer is SFTTrainer
