"""The report of real tiny runs (GRPO through ``main_ppo``, DPO through ``main_dpo``), opened in a headless browser."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.reporting.report import PLOT_FILE, REPORT_FILE, RUN_INFO_FILE, SAMPLES_FILE
from verl.reporting.report.__main__ import main as report_main
from verl.trainer import main_dpo, main_ppo
from verl.utils.device import get_device_name

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ord(ch) < 128) / len(solution_str) if solution_str else 0.0
"""


def _grpo_overrides(model_dir: str, root: Path, out: Path, steps: int) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={root / 'train.parquet'}",
        f"data.val_files={root / 'test.parquet'}",
        f"custom_reward_function.path={root / 'reward.py'}",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "data.train_batch_size=4",
        "data.max_prompt_length=128",
        "data.max_response_length=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=2",
        "trainer.save_freq=1",
        "trainer.report.num_samples=2",
        "trainer.logger=[file]",
        "trainer.torch_threads=1",
        f"trainer.default_local_dir={out}",
    ]


@pytest.mark.slow
def test_grpo_run_report_in_browser(tiny_model_dir: str, tmp_path: Path, browser) -> None:
    train, test = generate_arithmetic_splits(train_size=8, test_size=2, seed=4)
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    (tmp_path / "reward.py").write_text(REWARD_SOURCE)
    out = tmp_path / "run"

    # one step, then the same command resumes it for a second: the report spans both sessions
    assert main_ppo.main(_grpo_overrides(tiny_model_dir, tmp_path, out, steps=1)) == 0
    first = json.loads((out / RUN_INFO_FILE).read_text())
    assert first["status"] == "finished" and first["global_step"] == 1 and first["algorithm"] == "grpo"
    assert main_ppo.main(_grpo_overrides(tiny_model_dir, tmp_path, out, steps=2)) == 0

    info = json.loads((out / RUN_INFO_FILE).read_text())
    assert info["status"] == "finished" and info["global_step"] == 2 and info["resumed_from_step"] == 1
    assert info["started_at"] == first["started_at"] and info["hf_export"] == "hf_model"
    # the device the trainer picked by itself (trainer.device=auto): cuda on a GPU box, cpu elsewhere
    assert info["hardware"]["device"] == get_device_name("auto") and info["hardware"]["dtype"] == "float32"
    assert info["metrics_file"] == os.path.join("logs", "metrics.jsonl")
    samples = [json.loads(line) for line in (out / SAMPLES_FILE).read_text().splitlines()]
    assert [s["step"] for s in samples] == [1, 1, 2, 2]  # sampled at every saving step, 2 rows each
    assert all(s["ground_truth"] and isinstance(s["score"], float) for s in samples)
    assert (out / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "adv_estimator: grpo" in (out / "config.yaml").read_text()

    dom = browser.dump_dom(out / REPORT_FILE)
    # training reward, validation, KL, entropy, policy loss, response length, phases, throughput, MFU, grad norm, lr
    assert len(dom.svg_paths) >= 10 and all(n > 5 for n in dom.svg_paths), dom.svg_paths
    assert "val-core/arithmetic/reward/mean@1" in dom.text_in["heldout"]
    phases = dom.text_in["phases"]
    assert all(name in phases for name in ("gen", "update_actor", "save_checkpoint", "testing"))
    assert dom.tags_in["samples"]["tr"] == 1 + 4
    checkpoints = dom.text_in["checkpoints"]
    assert dom.tags_in["checkpoints"]["tr"] == 1 + 3  # global_step_1, global_step_2, hf_model
    assert "complete (latest)" in checkpoints and "hf_model" in checkpoints and "incomplete" not in checkpoints
    assert "finished" in dom.text_in["status"] and "adv_estimator: grpo" in dom.text_in["config"]
    browser.screenshot(out / REPORT_FILE, tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 10_000

    # rebuilt from the files alone, the same page comes back (but for its generation time)
    before = (out / REPORT_FILE).read_text().split("<footer>")[0]
    assert report_main([str(out)]) == 0
    assert (out / REPORT_FILE).read_text().split("<footer>")[0] == before


def test_dpo_run_report_panels(tiny_model_dir: str, tmp_path: Path) -> None:
    rows = [{"prompt": f"Q{i}: 1+{i}=", "chosen": f"{1 + i}.", "rejected": f"no{i}!"} for i in range(4)]
    data = tmp_path / "pairs.parquet"
    pd.DataFrame(rows).to_parquet(data)
    out = tmp_path / "dpo"
    argv = [
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"model.path={tiny_model_dir}",
        f"trainer.default_local_dir={out}",
        "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=1",
        "model.dtype=float32",
        "trainer.logger=[file]",
    ]
    assert main_dpo.main(argv) == 0
    info = json.loads((out / RUN_INFO_FILE).read_text())
    assert info["kind"] == "dpo" and info["status"] == "finished" and info["hf_export"] == "hf_model"
    records = [json.loads(x) for x in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["metrics"]["perf/throughput"] > 0  # tokens / s / rank, for the throughput panel
    page = (out / REPORT_FILE).read_text()
    for title in ("Loss", "Implicit rewards", "Reward margin", "Preference accuracy", "Throughput"):
        assert f'data-panel="{title}' in page, title
    assert "eval/rewards/accuracies" in page and (out / PLOT_FILE).is_file()

    off = tmp_path / "off"
    argv_off = [a.replace(str(out), str(off)) for a in argv] + ["trainer.plot=false", "trainer.report.enable=false"]
    assert main_dpo.main(argv_off) == 0
    assert not (off / REPORT_FILE).exists() and not (off / PLOT_FILE).exists() and not (off / RUN_INFO_FILE).exists()
