"""Image decoding, size limits, placeholders, the colour scorer, the vLLM request layout, LoRA on a VLM."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image

from verl.data.vision_utils import placeholder_content, process_image
from verl.rewards.colour import compute_score


def _png(size=(40, 20), rgb=(1, 2, 3)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, rgb).save(buf, format="PNG")
    return buf.getvalue()


def test_process_image_reads_every_stored_form_and_limits_pixels(tmp_path) -> None:
    path = tmp_path / "a.png"
    path.write_bytes(_png())
    forms = [_png(), str(path), {"bytes": _png()}, {"image": str(path)}, Image.open(path).convert("L")]
    for form in forms:
        img = process_image(form)
        assert img.mode == "RGB" and img.size == (40, 20)
    small = process_image(_png(), max_pixels=200)
    assert small.size[0] * small.size[1] <= 200 and small.size[0] == 2 * small.size[1]
    big = process_image({"bytes": _png(), "min_pixels": 3200})
    assert big.size[0] * big.size[1] >= 3100
    unset = process_image({"bytes": _png(), "min_pixels": None, "max_pixels": None}, max_pixels=200)  # parquet struct
    assert unset.size[0] * unset.size[1] <= 200
    with pytest.raises(ValueError, match="row 3 image 0: image file .* does not exist"):
        process_image(str(tmp_path / "missing.png"), where="row 3 image 0")
    with pytest.raises(ValueError, match="remote image"):
        process_image("https://example.com/a.png")
    with pytest.raises(ValueError, match="do not decode"):
        process_image(b"not an image")


def test_placeholders_become_content_parts() -> None:
    assert placeholder_content("plain") == "plain"
    assert placeholder_content("<image>A<image> and B") == [
        {"type": "image"},
        {"type": "text", "text": "A"},
        {"type": "image"},
        {"type": "text", "text": " and B"},
    ]


def test_colour_scorer() -> None:
    assert compute_score("Red.", "red") == 1.0 and compute_score("blue", "red") == 0.0
    assert compute_score("xyz", "red") == 1.0 and compute_score("\ufffd", "red") == 0.0
    assert compute_score("\ufffd", "blue") == 1.0 and compute_score("", "blue") == 0.0
    assert compute_score("green", "green") == 1.0 and compute_score("x", "green") == 0.0


def test_vllm_requests_send_images_with_raw_prompt_ids() -> None:
    import numpy as np

    from verl.workers.rollout.vllm_rollout import vllm_requests

    ids = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    image = Image.new("RGB", (4, 4))
    non_tensor = {
        "multi_modal_data": np.array([{"image": [image]}, {}], dtype=object),
        "raw_prompt_ids": np.array([[5, 99, 7], [8, 9, 10, 11]], dtype=object),
    }
    requests = vllm_requests(ids, mask, non_tensor)
    assert requests[0] == {"prompt_token_ids": [5, 99, 7], "multi_modal_data": {"image": [image]}}
    assert requests[1] == {"prompt_token_ids": [8, 9, 10, 11]}
    assert vllm_requests(ids, mask, {}) == [{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": [8, 9, 10, 11]}]


def test_lora_adapts_only_the_language_model_and_padding_follows_the_text_rule() -> None:
    from verl.models.lora import apply_lora
    from verl.models.tiny_vlm import make_tiny_vlm
    from verl.utils.fsdp_utils import resolve_remove_padding

    model, _ = make_tiny_vlm("qwen2_vl")
    assert resolve_remove_padding(None, model) is False  # sdpa: packing would attend one big masked square
    assert resolve_remove_padding(True, model) is True
    peft_model = apply_lora(model, 4, 8, "all-linear")
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any("language_model" in n for n in trainable)
    assert not any("visual" in n for n in trainable)


def test_geo3k_launch_script_resolves_as_upstream(tmp_path) -> None:
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(root, "examples", "grpo_trainer", "run_qwen2_5_vl-7b.sh")
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=root, HOME=str(tmp_path))
    for engine in (["hf"],):  # the default engine (vllm) runs in tests/examples/test_launch_scripts.py
        out = subprocess.run(
            ["bash", script, *engine, "--cfg", "job"], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr[-2000:]
        import yaml

        cfg = yaml.safe_load(out.stdout[out.stdout.index("data:") :])
        assert cfg["data"]["image_key"] == "images" and cfg["data"]["train_files"].endswith("geo3k/train.parquet")
        assert cfg["actor_rollout_ref"]["model"]["path"] == "Qwen/Qwen2.5-VL-7B-Instruct"
        assert cfg["actor_rollout_ref"]["rollout"]["name"] == (engine[0] if engine else "vllm")
        assert cfg["actor_rollout_ref"]["rollout"]["n"] == 5 and cfg["algorithm"]["adv_estimator"] == "grpo"
