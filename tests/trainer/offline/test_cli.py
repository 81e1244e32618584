"""``python -m verl.trainer.main_{sft,dpo,kto} key=value``: training, ``--cfg job``, exit code 2 on bad input."""

from __future__ import annotations

import os

import pandas as pd

from verl.trainer import main_dpo, main_kto, main_sft

FAST = ["model.dtype=float32", "trainer.logger=[file]", "trainer.device=cpu", "optim.lr=1e-3"]


def test_dpo_cli_trains_with_overrides(tiny_model_dir, pref_rows, jsonl, tmp_path) -> None:
    data = os.path.join(str(tmp_path), "pairs.parquet")
    pd.DataFrame(pref_rows).to_parquet(data)
    out = os.path.join(str(tmp_path), "out")
    argv = [
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"model.path={tiny_model_dir}",
        f"trainer.default_local_dir={out}",
        "trainer.namespace=cli",
        "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=1",
        "loss_type=ipo",
        "beta=0.5",
        *FAST,
    ]
    assert main_dpo.main(argv) == 0
    root = os.path.join(out, "cli")
    assert os.path.isfile(os.path.join(root, "global_step_2", "actor", "optim_world_size_1_rank_0.safetensors"))
    assert os.path.isfile(os.path.join(root, "hf_model", "config.json"))
    records = jsonl(os.path.join(root, "logs", "metrics.jsonl"))
    assert "rewards/margins" in records[0]["metrics"]
    assert "eval/rewards/accuracies" in records[-1]["metrics"]
    with open(os.path.join(root, "logs", "config.json")) as f:
        assert '"loss_type": "ipo"' in f.read()


def test_cfg_job_prints_config(capsys) -> None:
    assert main_kto.main(["--cfg", "job", "beta=0.3", "desirable_weight=2"]) == 0
    text = capsys.readouterr().out
    assert "beta: 0.3" in text and "desirable_weight: 2.0" in text and "path: smollm2-135m-instruct" in text


def test_bad_config_exits_2_naming_the_key(capsys) -> None:
    assert main_dpo.main(["loss_type=nope"]) == 2
    assert "loss_type" in capsys.readouterr().err
    assert main_sft.main(["optim.lrr=1"]) == 2
    assert "optim.lrr: unknown key; did you mean optim.lr?" in capsys.readouterr().err


def test_missing_train_files_and_bad_rows_exit_2(tiny_model_dir, tmp_path, capsys) -> None:
    assert main_sft.main([f"model.path={tiny_model_dir}", *FAST]) == 2
    assert "data.train_files" in capsys.readouterr().err
    data = os.path.join(str(tmp_path), "sft.jsonl")
    with open(data, "w") as f:
        f.write('{"prompt": "a", "response": "b"}\n{"prompt": "c"}\n')
    argv = [f"data.train_files={data}", f"model.path={tiny_model_dir}", f"trainer.default_local_dir={tmp_path}", *FAST]
    assert main_sft.main(argv) == 2
    err = capsys.readouterr().err
    assert "sft.jsonl row 1: missing field 'response'" in err
