"""``python -m verl.trainer.main_ppo`` end to end on a tiny model, and its answers to bad data and bad configs.

The subprocess test is the real command line (a fresh interpreter, as a user runs it); the error tests call
``main_ppo.main([...])`` in-process, which is the same code path without paying for a second interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer import main_ppo

REPO_ROOT = Path(__file__).resolve().parents[2]

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ord(ch) < 128) / len(solution_str) if solution_str else 0.0
"""


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("main_ppo_task")
    train, test = generate_arithmetic_splits(train_size=8, test_size=2, seed=4)
    write_parquet(train, str(root / "train.parquet"))
    write_parquet(test, str(root / "test.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "val": str(root / "test.parquet"), "reward": str(root / "reward.py")}


def _overrides(model_dir: str, files: dict[str, str], out_dir: Path) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={files['train']}",
        f"data.val_files={files['val']}",
        f"custom_reward_function.path={files['reward']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=128",
        "data.max_response_length=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "trainer.total_training_steps=2",
        "trainer.test_freq=2",
        "trainer.logger=[console,file]",
        "trainer.torch_threads=1",
        f"trainer.default_local_dir={out_dir}",
    ]


def test_main_ppo_subprocess_trains_saves_exports_and_plots(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *_overrides(tiny_model_dir, task_files, out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "validation before training (step 0): val-core/arithmetic/reward/mean@1" in proc.stdout
    assert "validation after training (step 2): val-core/arithmetic/reward/mean@1" in proc.stdout
    # what one step consumes: printed at start and kept in the run directory
    assert "one step of this run:" in proc.stdout and "responses per step" in proc.stdout
    plan = {row["what"]: row["value"] for row in json.loads((out / "step_plan.json").read_text())}
    assert plan["prompts per step"] > 0

    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert "val-core/arithmetic/reward/mean@1" in records[0]["metrics"]
    assert {"actor/pg_loss", "critic/score/mean", "timing_s/step"} <= set(records[2]["metrics"])

    # save_freq=-1: one checkpoint at the end
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (out / "global_step_2" / "actor" / "model_world_size_1_rank_0.safetensors").is_file()
    assert (out / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the Hugging Face export holds the trained actor's weights
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.model_merger import load_full_state_dict

    exported = AutoModelForCausalLM.from_pretrained(str(out / "hf_model"))
    assert AutoTokenizer.from_pretrained(str(out / "hf_model")).eos_token == "<eos>"
    trained = load_full_state_dict(str(out / "global_step_2" / "actor"))
    exported_state = exported.state_dict()
    for name, tensor in trained.items():
        assert exported_state[name].equal(tensor.to(exported_state[name].dtype)), name
    initial = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    assert any(not initial[k].equal(trained[k]) for k in trained), "training did not change the weights"


# ------------------------------------------------------------------------------------------------- bad data
def _rows(n: int = 6) -> list[dict]:
    rows, _ = generate_arithmetic_splits(train_size=n, test_size=0, seed=5)
    return rows


def _write(path: Path, rows: list[dict]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


def _bad_train_file(case: str, root: Path) -> tuple[str, list[str]]:
    """The train file of a bad-data case and the fragments its error message must contain."""
    if case == "missing column":
        rows = [{k: v for k, v in row.items() if k != "reward_model"} for row in _rows()]
        return _write(root / "no_rm.parquet", rows), ["no_rm.parquet", "no column 'reward_model'"]
    if case == "empty file":
        path = root / "empty.parquet"
        pq.write_table(pa.Table.from_pylist(_rows()).slice(0, 0), str(path))
        return str(path), ["empty.parquet", "has no rows"]
    if case == "wrong type":
        # a common mistake: the prompt as a plain string instead of a list of chat messages
        rows = [{**row, "prompt": row["prompt"][0]["content"]} for row in _rows()]
        return _write(root / "str_prompt.parquet", rows), [
            "str_prompt.parquet",
            "row 0",
            "column 'prompt'",
            "expected a non-empty list of chat messages",
            "got str",
        ]
    if case == "null in one row":
        rows = _rows()
        rows[3]["data_source"] = None
        return _write(root / "null_source.parquet", rows), [
            "null_source.parquet",
            "row 3",
            "column 'data_source'",
            "expected a string, got None",
        ]
    assert case == "missing file"
    return str(root / "nowhere.parquet"), ["nowhere.parquet", "does not exist"]


@pytest.mark.parametrize("case", ["missing column", "empty file", "wrong type", "null in one row", "missing file"])
def test_bad_training_data_exits_2_naming_file_row_and_column(
    case: str, tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train_file, fragments = _bad_train_file(case, tmp_path)
    code = main_ppo.main([*_overrides(tiny_model_dir, task_files, tmp_path / "out"), f"data.train_files={train_file}"])
    err = capsys.readouterr().err
    assert code == 2
    assert "data.train_files: RLHFDataset" in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing was started


def test_training_set_smaller_than_one_batch_exits_2(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = _overrides(tiny_model_dir, task_files, tmp_path / "out")
    code = main_ppo.main([*overrides, "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16"])
    assert code == 2
    assert "data.train_batch_size=16 is larger than the training set (8 rows" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.totl_epochs=2", "trainer.totl_epochs: unknown key; did you mean trainer.total_epochs?"),
        ("actor_rollout_ref.rollout.n=two", "actor_rollout_ref.rollout.n: expected int, got 'two'"),
        ("data.train_batch_size=6", "data.train_batch_size=6 is not a multiple of actor_rollout_ref.actor.ppo_mini"),
    ],
)
def test_bad_config_exits_2_before_training(
    override: str,
    message: str,
    tiny_model_dir: str,
    task_files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main_ppo.main([*_overrides(tiny_model_dir, task_files, tmp_path / "out"), override])
    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (tmp_path / "out").exists()
