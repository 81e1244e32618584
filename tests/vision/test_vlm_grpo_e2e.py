"""GRPO with images end to end (``examples/vision/colour_grpo.py`` through ``main_ppo``): a tiny random Qwen2-VL
on the synthetic colour task, where only the image tells the answer; then the export and the checkpoint merger."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _example():
    spec = importlib.util.spec_from_file_location("colour_grpo", ROOT / "examples" / "vision" / "colour_grpo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _records(run: Path) -> list[dict]:
    return [json.loads(line)["metrics"] for line in (run / "logs" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_reward_rises_when_the_policy_reads_the_images_and_the_export_keeps_the_processor(tmp_path: Path) -> None:
    argv = ["--workdir", str(tmp_path), "trainer.total_training_steps=20", "trainer.test_freq=20"]
    argv += ["trainer.torch_threads=1", "trainer.plot=false", "trainer.report.enable=false"]
    assert _example().main(argv) == 0
    run = tmp_path / "run"
    records = _records(run)
    scores = [r["critic/score/mean"] for r in records if "critic/score/mean" in r]
    key = "val-core/synthetic_colour/reward/mean@1"
    vals = [r[key] for r in records if key in r]
    assert len(scores) == 20
    # chance is 0.5 (the prompt text is the same for both colours): the first steps sit near it, the last well above
    assert sum(scores[:3]) / 3 < 0.65
    assert sum(scores[-4:]) / 4 > 0.8, scores
    assert vals[0] == pytest.approx(0.5, abs=0.2) and vals[-1] > 0.8, vals

    from transformers import AutoModelForImageTextToText

    from verl.model_merger.base_model_merger import merge_checkpoint
    from verl.models.vlm import load_processor

    # the processor (image processor + tokenizer + chat template) is saved with the exported and the merged model
    merged = Path(merge_checkpoint(str(run / "global_step_20" / "actor"), str(tmp_path / "merged")))
    for model_dir in (run / "hf_model", merged):
        assert (model_dir / "processor_config.json").is_file() and (model_dir / "tokenizer.json").is_file()
        assert load_processor(str(model_dir)).image_processor is not None
    model = AutoModelForImageTextToText.from_pretrained(str(merged))
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
