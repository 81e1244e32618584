"""Offline trainers: SIGTERM saves the step just finished and stops; the next fit resumes there (said before its
first step) without logging a step twice; a checkpoint with a truncated file is named and skipped."""

from __future__ import annotations

import logging
import os
import signal

from verl.trainer.offline import SFTTrainer

ROWS = [{"prompt": f"Q{i}:", "response": str(i)} for i in range(4)]


def _trainer(model_dir, fast, out, steps):
    cfg = {**fast, "trainer.default_local_dir": str(out), "trainer.export_hf": False}
    cfg.update({"trainer.total_training_steps": steps, "data.train_batch_size": 1, "trainer.max_ckpt_to_keep": 5})
    return SFTTrainer(model=model_dir, dataset=ROWS, config=cfg)


def test_sigterm_saves_stops_and_the_next_fit_resumes(tiny_model_dir, fast, tmp_path, monkeypatch, capsys, jsonl):
    out = tmp_path / "sft"
    trainer = _trainer(tiny_model_dir, fast, out, 4)
    real_step = SFTTrainer._train_step

    def terminated_in_step_2(self, rows):
        if self.global_step == 1:  # the second step is running
            os.kill(os.getpid(), signal.SIGTERM)
        return real_step(self, rows)

    monkeypatch.setattr(SFTTrainer, "_train_step", terminated_in_step_2)
    final = trainer.fit()
    assert final["stopped_by"] == "SIGTERM" and final["global_step"] == 2.0
    assert "stopped by SIGTERM after step 2" in capsys.readouterr().err
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    monkeypatch.setattr(SFTTrainer, "_train_step", real_step)

    resumed = _trainer(tiny_model_dir, fast, out, 4)
    assert resumed.fit()["global_step"] == 4.0
    assert f"resumed from {out / 'global_step_2'} at step 2" in capsys.readouterr().out
    assert [r["step"] for r in jsonl(str(out / "logs" / "metrics.jsonl"))] == [1, 2, 3, 4]


def test_truncated_checkpoint_file_is_named_and_skipped(tiny_model_dir, fast, tmp_path, verl_logs):
    out = tmp_path / "sft"
    trainer = _trainer(tiny_model_dir, fast, out, 2)
    trainer.config.trainer.save_freq = 1
    trainer.fit()
    optim = out / "global_step_2" / "actor" / "optim_world_size_1_rank_0.safetensors"
    os.truncate(optim, os.path.getsize(optim) // 2)
    again = _trainer(tiny_model_dir, fast, out, 3)
    again.fit()
    warned = "\n".join(r.getMessage() for r in verl_logs if r.levelno >= logging.WARNING)
    assert str(optim) in warned and "truncated or rewritten" in warned
    assert again.resumed_from == str(out / "global_step_1")
