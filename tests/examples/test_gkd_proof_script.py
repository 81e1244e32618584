"""The distillation proof script (examples/gkd_trainer/distill_smollm2_arithmetic.py) runs end to end on tiny
random models (``--smoke``): pruning, greedy evaluation, GKD steps, the result file."""

from __future__ import annotations

import json
import os
import runpy
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_proof_script_smoke(tmp_path, monkeypatch):
    script = os.path.join(ROOT, "examples", "gkd_trainer", "distill_smollm2_arithmetic.py")
    # in this process (no second interpreter to start), as `python <script> --smoke --out <tmp>` would run it
    monkeypatch.setattr(sys, "argv", [script, "--smoke", "--out", str(tmp_path)])
    runpy.run_path(script, run_name="__main__")
    out = json.loads((tmp_path / "result.json").read_text())
    assert out["student_layers"] == 2 and out["final_train_metrics"]["global_step"] == 2.0
    assert out["final_train_metrics"]["distill/on_policy"] == 1.0
    for key in ("teacher_accuracy", "student_accuracy_before", "student_accuracy_after"):
        assert 0.0 <= out[key] <= 1.0
