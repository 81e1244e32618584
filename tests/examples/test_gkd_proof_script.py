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
    assert out["training_curve"]["steps_logged"] == 2 and "first_quarter" in out["training_curve"]["distill/reverse_kl"]
    for key in ("teacher_accuracy", "student_accuracy_before", "student_accuracy_after"):
        assert 0.0 <= out[key] <= 1.0


def test_drop_layers_by_index_keeps_the_others_in_order(tmp_path):
    import pytest

    sys.path.insert(0, os.path.join(ROOT, "examples", "gkd_trainer"))
    from distill_smollm2_arithmetic import drop_layers

    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm

    model = make_tiny_causal_lm(TinyModelSpec(num_hidden_layers=5))
    layers = list(model.model.layers)
    drop_layers(model, indices=[1, 3])
    assert list(model.model.layers) == [layers[0], layers[2], layers[4]] and model.config.num_hidden_layers == 3
    assert [layer.self_attn.layer_idx for layer in model.model.layers] == [0, 1, 2]
    with pytest.raises(ValueError, match=r"--drop_indices must lie in \[1, 1\]"):
        drop_layers(model, indices=[0])
