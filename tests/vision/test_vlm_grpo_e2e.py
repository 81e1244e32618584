"""GRPO with images end to end (``examples/vision/colour_grpo.py`` through ``main_ppo``): a tiny random Qwen2-VL
on the synthetic colour task, where only the image tells the answer."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _example():
    spec = importlib.util.spec_from_file_location("colour_grpo", ROOT / "examples" / "vision" / "colour_grpo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("colour_grpo")


def _records(run: Path) -> list[dict]:
    return [json.loads(line)["metrics"] for line in (run / "logs" / "metrics.jsonl").read_text().splitlines()]


def test_two_steps_run_validate_and_export_the_processor(workdir: Path) -> None:
    example = _example()
    rc = example.main(
        ["--workdir", str(workdir), "trainer.total_training_steps=2", "trainer.test_freq=2", "trainer.torch_threads=1"]
    )
    assert rc == 0
    run = workdir / "run"
    steps = [r for r in _records(run) if "critic/score/mean" in r]
    assert len(steps) == 2
    export = run / "hf_model"
    # the processor (image processor + tokenizer) is saved with the exported model
    assert (export / "processor_config.json").is_file() and (export / "tokenizer.json").is_file()
    from verl.model_merger.base_model_merger import merge_checkpoint
    from verl.utils.models.vlm import load_processor

    assert load_processor(str(export)).image_processor is not None
    # the checkpoint merger writes a vision-language model with its processor too
    merged = merge_checkpoint(str(run / "global_step_2" / "actor"), str(workdir / "merged"))
    assert (Path(merged) / "processor_config.json").is_file()
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(merged)
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    assert load_processor(merged).image_processor is not None


@pytest.mark.slow
def test_reward_rises_when_the_policy_reads_the_images(workdir: Path) -> None:
    example = _example()
    out = workdir / "long"
    argv = ["--workdir", str(workdir), f"trainer.default_local_dir={out}", "trainer.total_training_steps=22"]
    argv += ["trainer.test_freq=22", "trainer.torch_threads=1", "trainer.export_hf=false", "trainer.plot=false"]
    argv += ["trainer.report.enable=false", "actor_rollout_ref.actor.checkpoint.save_contents=[model]"]
    assert example.main(argv) == 0
    records = _records(out)
    scores = [r["critic/score/mean"] for r in records if "critic/score/mean" in r]
    vals = [
        r["val-core/synthetic_colour/reward/mean@1"] for r in records if "val-core/synthetic_colour/reward/mean@1" in r
    ]
    # chance is 0.5 (the prompt text is the same for both colours): the first steps sit near it, the last well above
    assert sum(scores[:4]) / 4 < 0.65
    assert sum(scores[-4:]) / 4 > 0.8, scores
    assert vals[0] == pytest.approx(0.5, abs=0.2) and vals[-1] > 0.8, vals
    assert os.path.isdir(out)
