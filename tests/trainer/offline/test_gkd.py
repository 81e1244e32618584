"""GKD / on-policy distillation with a teacher whose distribution is known (a bigram table of hand-set logits):
teacher log-probs and the loss token by token against a direct computation, on-policy sampling, the tokenizer check,
learning, checkpoints and resume."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.protocol import DataProto
from verl.trainer.config.validation import ConfigError
from verl.trainer.offline.gkd import GKDTrainer
from verl.workers.teacher import TeacherModel, check_tokenizers_compatible

ROWS = [{"prompt": "ab:", "response": "cd"}, {"prompt": "xy:", "response": "zz1"}]
VOCAB = 259  # the byte tokenizer: 256 bytes + pad, bos, eos


class BigramTeacher(torch.nn.Module):
    """``logits[b, t] = table[input_ids[b, t]]``: the next-token distribution depends on the current token only."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(torch.randn(VOCAB, VOCAB, generator=g) * 3)

    def forward(self, input_ids, attention_mask=None):
        return self.table[input_ids]


def _kl(p, q) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0)


def test_teacher_log_probs_token_by_token(byte_tokenizer):
    teacher_module = BigramTeacher()
    teacher = TeacherModel(teacher_module, byte_tokenizer, tokenizer=byte_tokenizer)
    ids = torch.tensor([[256, 97, 98, 99, 100], [101, 102, 103, 104, 105]])  # prompt 2 (first row left-padded)
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    data = DataProto.from_dict(tensors={"input_ids": ids, "attention_mask": mask, "responses": ids[:, 2:]})
    got = teacher.compute_log_prob(data, micro_batch_size=1).batch["teacher_log_prob"]
    table = torch.log_softmax(teacher_module.table.detach(), -1)
    for b in range(2):
        for j in range(3):
            t = 2 + j
            assert got[b, j].item() == pytest.approx(table[ids[b, t - 1], ids[b, t]].item(), abs=1e-5)


def test_tokenizer_mismatch_is_refused(byte_tokenizer):
    from verl.models.tiny import make_byte_tokenizer

    other = make_byte_tokenizer()
    other.add_tokens(["<|extra|>"])
    with pytest.raises(ConfigError, match=r"teacher.path: the teacher's tokenizer differs.*<\|extra\|>"):
        check_tokenizers_compatible(byte_tokenizer, other)
    with pytest.raises(ConfigError, match="tokenizer differs"):
        TeacherModel(BigramTeacher(), byte_tokenizer, tokenizer=other)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_gkd_loss_on_dataset_responses_matches_direct_computation(tiny_model_dir, byte_tokenizer, fast, beta):
    teacher = BigramTeacher()
    config = {**fast, "gkd.beta": beta, "gkd.temperature": 1.0, "gkd.lmbda": 0.0}
    trainer = GKDTrainer(tiny_model_dir, teacher=teacher, tokenizer=byte_tokenizer, dataset=ROWS, config=config)
    ev = trainer.evaluate(ROWS)
    student = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    table = torch.softmax(teacher.table.detach().double(), -1)
    total, rkl, count = 0.0, 0.0, 0
    for row in ROWS:
        prompt = list(row["prompt"].encode())
        ids = prompt + list(row["response"].encode()) + [258]  # + <eos>
        with torch.no_grad():
            ps_all = torch.softmax(student(torch.tensor([ids])).logits[0].double(), -1)
        for t in range(len(prompt), len(ids)):  # each response token, predicted at t - 1
            ps, pt = ps_all[t - 1].tolist(), table[ids[t - 1]].tolist()
            if beta == 0.0:
                total += _kl(pt, ps)
            elif beta == 1.0:
                total += _kl(ps, pt)
            else:
                m = [beta * a + (1 - beta) * c for a, c in zip(pt, ps)]
                total += beta * _kl(pt, m) + (1 - beta) * _kl(ps, m)
            rkl += math.log(ps[ids[t]]) - math.log(pt[ids[t]])
            count += 1
    assert ev["eval/loss"] == pytest.approx(total / count, rel=1e-4)
    assert ev["eval/distill/reverse_kl"] == pytest.approx(rkl / count, rel=1e-4, abs=1e-5)


def test_on_policy_steps_sample_from_the_student_and_resume(tiny_model_dir, byte_tokenizer, fast, tmp_path, jsonl):
    config = {**fast, "gkd.lmbda": 1.0, "gkd.max_new_tokens": 6, "gkd.loss_type": "reverse_kl"}
    trainer = GKDTrainer(tiny_model_dir, teacher=BigramTeacher(), tokenizer=byte_tokenizer, dataset=ROWS, config=config)
    rows = trainer.generate_on_policy([trainer.train_dataset[i] for i in range(2)])
    for row, item in zip(rows, ROWS):
        prompt = list(item["prompt"].encode())
        assert row["input_ids"][: len(prompt)] == prompt and row["loss_mask"][: len(prompt)] == [0] * len(prompt)
        n = sum(row["loss_mask"])
        assert 1 <= n <= 6 and (n == 6 or row["input_ids"][-1] == 258)  # up to max_new_tokens, or ended by EOS
    out = trainer.train(max_steps=2, per_device_train_batch_size=2, save_steps=1, output_dir=str(tmp_path))
    assert out["distill/on_policy"] == 1.0 and out["global_step"] == 2
    again = GKDTrainer(tiny_model_dir, teacher=BigramTeacher(), tokenizer=byte_tokenizer, dataset=ROWS, config=config)
    out = again.train(max_steps=3, per_device_train_batch_size=2, output_dir=str(tmp_path), resume_from_checkpoint=True)
    assert again.resumed_from is not None and again.resumed_from.endswith("global_step_2")
    assert out["global_step"] == 3


def test_lmbda_mixes_on_and_off_policy_steps(tiny_model_dir, byte_tokenizer, fast):
    config = {**fast, "gkd.lmbda": 0.5}
    trainer = GKDTrainer(tiny_model_dir, teacher=BigramTeacher(), tokenizer=byte_tokenizer, dataset=ROWS, config=config)
    draws = []
    for step in range(200):
        trainer.global_step = step
        draws.append(trainer._step_is_on_policy())
    assert 70 < sum(draws) < 130  # about half
    trainer.global_step = 7
    assert trainer._step_is_on_policy() == draws[7]  # the same choice after a resume
    for lmbda, want in ((0.0, False), (1.0, True)):
        trainer.config.gkd.lmbda = lmbda
        assert all(trainer._step_is_on_policy() is want for trainer.global_step in range(20))


def test_student_moves_toward_the_teacher(tiny_model_dir, byte_tokenizer, fast, tmp_path):
    config = {**fast, "gkd.lmbda": 0.5, "gkd.max_new_tokens": 4, "gkd.temperature": 1.0}
    teacher = BigramTeacher()
    trainer = GKDTrainer(
        tiny_model_dir, teacher=teacher, tokenizer=byte_tokenizer, dataset=ROWS, eval_dataset=ROWS, config=config
    )
    before = trainer.evaluate()["eval/loss"]
    out = trainer.train(max_steps=12, per_device_train_batch_size=2, learning_rate=1e-2, output_dir=str(tmp_path))
    assert out["eval/loss"] < 0.7 * before


def test_reverse_kl_needs_lmbda_one(tiny_model_dir, byte_tokenizer, fast):
    with pytest.raises(ConfigError, match="gkd.lmbda=1"):
        GKDTrainer(
            tiny_model_dir,
            teacher=BigramTeacher(),
            tokenizer=byte_tokenizer,
            dataset=ROWS,
            config={**fast, "gkd.loss_type": "reverse_kl", "gkd.lmbda": 0.5},
        )


def test_a_gkd_run_writes_its_plot_and_report(tiny_model_dir, byte_tokenizer, fast, tmp_path, verl_logs):
    """GKD is a trainer kind of its own for the plot and the report (loss, reverse KL to the teacher, on-policy
    share): both are written, the report shows no problem and ``verl report`` rebuilds it."""
    from verl.reporting.plotting import PANELS, resolve_panels
    from verl.reporting.report.__main__ import main as report_main
    from verl.reporting.report.collect import collect_run

    config = {**fast, "gkd.lmbda": 0.0, "trainer.plot": True, "trainer.report.enable": True}
    trainer = GKDTrainer(tiny_model_dir, teacher=BigramTeacher(), tokenizer=byte_tokenizer, dataset=ROWS, config=config)
    trainer.train(max_steps=2, per_device_train_batch_size=2, save_steps=1, output_dir=str(tmp_path))
    assert (tmp_path / "metrics.png").stat().st_size > 0 and (tmp_path / "report.html").is_file()
    assert not [r for r in verl_logs if r.levelname == "WARNING" and "report" in r.getMessage()]
    data = collect_run(str(tmp_path))
    assert data.kind == "gkd" and data.info["status"] == "finished" and not data.problems
    drawn = {p.title for p in resolve_panels("gkd", {k for _, m in data.rows for k in m})}
    assert {"Distillation loss", "Reverse KL to the teacher"} <= drawn and set(PANELS["gkd"])
    assert report_main([str(tmp_path)]) == 0
    assert 'id="error"' not in (tmp_path / "report.html").read_text()


def test_teacher_logits_at_positions_equal_its_full_logits(tiny_model_dir, byte_tokenizer):
    """``TeacherModel.logits_at`` runs the LM head at the chosen positions only, with the full logits' values."""
    teacher = TeacherModel(AutoModelForCausalLM.from_pretrained(tiny_model_dir), byte_tokenizer)
    ids = torch.randint(0, 250, (3, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    positions = torch.tensor([0, 4, 8, 11, 20])
    full = teacher.logits(ids, mask)
    torch.testing.assert_close(teacher.logits_at(ids, mask, None, positions), full.flatten(0, 1)[positions][None])
