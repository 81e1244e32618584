"""The data-preparation scripts of examples/data_preprocess/: hub loading (a stand-in for ``datasets.load_dataset``),
local copies in both layouts, and the one-line failure when the hub cannot be reached. No real network."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "examples" / "data_preprocess"

GSM8K = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A car costs $1,200 more than $800. Total?", "answer": "1200 + 800 = 2000\n#### 2,000"},
]
MATH = [
    {"problem": "What is $1+1$?", "solution": "We add: $1+1=\\boxed{2}$.", "level": "Level 1", "type": "Algebra"},
    {"problem": "Simplify $\\frac{2}{4}$.", "solution": "It is $\\boxed{\\frac{1}{2}}$.", "level": "Level 2"},
]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"data_preprocess_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(path: Path) -> list[dict]:
    return pq.read_table(str(path)).to_pylist()


def test_gsm8k_from_the_hub_uses_load_dataset_openai_gsm8k_main(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(path, name=None, **kwargs):
        calls.append((path, name))
        return datasets.DatasetDict({s: datasets.Dataset.from_list(GSM8K) for s in ("train", "test")})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert _load("gsm8k").main(["--local_save_dir", str(tmp_path / "out")]) == 0
    assert calls == [("openai/gsm8k", "main")]
    rows = _rows(tmp_path / "out" / "test.parquet")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["7", "2000"]
    assert rows[1]["extra_info"] == {"split": "test", "index": 1, "question": GSM8K[1]["question"],
                                     "answer": GSM8K[1]["answer"]}  # fmt: skip


def test_gsm8k_local_hub_snapshot_layout(tmp_path):
    """A ``hf download openai/gsm8k --repo-type dataset --local-dir DIR`` copy: main/train-00000-of-00001.parquet."""
    raw = tmp_path / "raw" / "main"
    raw.mkdir(parents=True)
    for split in ("train", "test"):
        pq.write_table(pa.Table.from_pylist(GSM8K), str(raw / f"{split}-00000-of-00001.parquet"))
    module = _load("gsm8k")
    assert module.main(["--local_dataset_path", str(tmp_path / "raw"), "--local_save_dir", str(tmp_path / "o")]) == 0
    rows = _rows(tmp_path / "o" / "train.parquet")
    assert rows[0]["data_source"] == "openai/gsm8k" and rows[0]["prompt"][0]["content"].startswith("Tom has 3 apples")
    assert sorted(os.listdir(tmp_path / "o")) == ["test.parquet", "train.parquet"]  # no temp files left


def test_gsm8k_bad_local_data_is_one_line_exit_2(tmp_path, capsys):
    module = _load("gsm8k")
    bad = tmp_path / "train.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "no marker"}) + "\n")
    code = module.main(["--train_file", str(bad), "--test_file", str(bad), "--local_save_dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{bad} row 0: reference answer has no '#### <number>'" in err
    assert module.main(["--local_dataset_path", str(tmp_path / "nope"), "--local_save_dir", str(tmp_path / "o")]) == 2
    assert "nope: not a directory" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_OFFLINE"))}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def test_gsm8k_cli_local_jsonl_and_offline_failure(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "test"):
        (raw / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GSM8K))
    script = str(SCRIPTS / "gsm8k.py")
    env = _env(HF_HOME=str(tmp_path / "hf"))
    # the offline failure needs ``datasets``; when present it runs beside the local run (two interpreters, 2 cores)
    offline_proc = None
    if importlib.util.find_spec("datasets") is not None:
        offline_proc = subprocess.Popen(
            [sys.executable, script, "--local_save_dir", str(tmp_path / "never")],
            env={**env, "HF_DATASETS_OFFLINE": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    try:
        ok = subprocess.run(
            [sys.executable, script, "--local_dataset_path", str(raw), "--local_save_dir", str(tmp_path / "out")],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        assert len(_rows(tmp_path / "out" / "train.parquet")) == 2

        pytest.importorskip("datasets")
        _, offline_stderr = offline_proc.communicate(timeout=120)
    finally:
        if offline_proc is not None and offline_proc.poll() is None:
            offline_proc.kill()
            offline_proc.communicate()
    offline = subprocess.CompletedProcess(offline_proc.args, offline_proc.returncode, "", offline_stderr)
    lines = [line for line in offline.stderr.splitlines() if line.strip()]
    assert offline.returncode == 2 and "Traceback" not in offline.stderr, offline.stderr
    assert len(lines) == 1, offline.stderr
    assert "'openai/gsm8k' (config 'main')" in lines[0] and "HF_DATASETS_OFFLINE=1 is set" in lines[0]
    assert "--local_dataset_path" in lines[0] and not (tmp_path / "never").exists()


def test_math_local_copy_and_boxed_ground_truth(tmp_path):
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in MATH))
    module = _load("math_dataset")
    assert module.main(["--local_dataset_path", str(tmp_path), "--local_save_dir", str(tmp_path / "out")]) == 0
    rows = _rows(tmp_path / "out" / "train.parquet")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "\\frac{1}{2}"]
    assert rows[0]["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert rows[0]["extra_info"] == {"split": "train", "index": 0, "level": "Level 1", "type": "Algebra"}
    from verl.rewards import default_compute_score

    assert default_compute_score(rows[1]["data_source"], "so \\boxed{1/2}", rows[1]["reward_model"]["ground_truth"])
    with pytest.raises(ValueError, match=r"x row 0: solution has no \\boxed"):
        module.convert_records([{"problem": "p", "solution": "no box"}], "train", "x")


def test_geo3k_from_the_hub_and_from_a_local_parquet(tmp_path, monkeypatch):
    import io

    from PIL import Image

    datasets = pytest.importorskip("datasets")
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (0, 255, 0)).save(buf, format="PNG")
    raw = [{"problem": "<image>Find x.", "answer": "3", "images": [{"bytes": buf.getvalue(), "path": None}]}]
    calls = []

    def fake_load_dataset(path, name=None, **kwargs):
        calls.append(path)
        return datasets.DatasetDict({s: datasets.Dataset.from_list(raw) for s in ("train", "test")})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    geo3k = _load("geo3k")
    assert geo3k.main(["--local_save_dir", str(tmp_path / "hub")]) == 0
    assert calls == ["hiyouga/geometry3k"]
    local = tmp_path / "raw"
    local.mkdir()
    for split in ("train", "test"):
        pq.write_table(pa.Table.from_pylist(raw), local / f"{split}.parquet")
    assert geo3k.main(["--local_dataset_path", str(local), "--local_save_dir", str(tmp_path / "out")]) == 0
    for out in ("hub", "out"):
        row = _rows(tmp_path / out / "train.parquet")[0]
        assert row["data_source"] == "hiyouga/geometry3k" and row["reward_model"]["ground_truth"] == "3"
        assert row["prompt"][0]["content"].startswith("<image>Find x. You FIRST think")
        assert Image.open(io.BytesIO(row["images"][0]["bytes"])).size == (8, 8)
    bad = [{"problem": "<image>x", "answer": "1", "images": [42]}]
    with pytest.raises(ValueError, match="row 0 image 0: an image must be"):
        geo3k.convert_records(bad, "train", "raw.parquet")
