"""A run whose checkpoint to resume is its last step, found from the markers alone (utils/checkpoint/finished.py)."""

from __future__ import annotations

import os

from verl.checkpoint.finished import finished_checkpoint, finished_run_message
from verl.checkpoint.layout import finalize_checkpoint


def _save(root, step: int) -> str:
    step_dir = os.path.join(root, f"global_step_{step}")
    os.makedirs(os.path.join(step_dir, "actor"))
    finalize_checkpoint(str(root), step)
    return step_dir


def test_finished_only_at_or_past_the_last_step(tmp_path) -> None:
    cfg = {"resume_mode": "auto", "default_local_dir": str(tmp_path)}
    assert finished_checkpoint(cfg, 3) is None  # no checkpoint: a fresh run
    _save(tmp_path, 2)
    assert finished_checkpoint(cfg, 3) is None  # one step left
    last = _save(tmp_path, 3)
    assert finished_checkpoint(cfg, 3) == (last, 3)
    assert finished_checkpoint(cfg, 2) == (last, 3)  # fewer steps asked than done: nothing to train either
    assert finished_checkpoint({**cfg, "resume_mode": "disable"}, 3) is None  # starts afresh
    named = {"resume_mode": "resume_path", "resume_from_path": os.path.join(tmp_path, "global_step_2")}
    assert finished_checkpoint(named, 3) is None and finished_checkpoint(named, 2)[1] == 2


def test_the_message_is_one_line_with_the_run_and_both_ways_on(tmp_path) -> None:
    _save(tmp_path, 4)
    (tmp_path / "report.html").write_text("<html></html>")
    text = finished_run_message({"resume_mode": "auto", "default_local_dir": str(tmp_path)}, 4, fresh_hint="HINT")
    assert "\n" not in text
    for fragment in (f"run {tmp_path} already finished", "global_step_4 is step 4 of 4", "report.html", "HINT"):
        assert fragment in text
    assert "raise trainer.total_training_steps" in text
