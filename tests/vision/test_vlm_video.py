"""Videos in vision-language RL on a tiny random Qwen2-VL / Qwen2.5-VL (CPU, fp32): the frame patch layout against
transformers' own video processor code, videos from parquet through RLHFDataset (frames, frame directories, video
files), the errors, and the actor's recomputed log-probs equal to the rollout's for a batch mixing a video row, an
image row and a text row."""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import types

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from verl.data.rl_dataset import RLHFDataset
from verl.data.synthetic_vision import colour_rows
from verl.data.video_utils import process_video, sample_indices
from verl.models.tiny_vlm import make_tiny_vlm, make_tiny_vlm_processor
from verl.models.vlm import video_inputs_from_frames, vision_forward_kwargs

from .test_vlm_rollout_actor import actor_config, prompts_of, rollout_config


def _frames(n: int, seed: int = 0, size: tuple[int, int] = (52, 40)) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)) for _ in range(n)]


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _clip(n: int, seed: int = 0, fps: float = 2.0) -> dict:
    """A stored video: ``n`` random 52 x 40 PNG frames at ``fps``."""
    return {"video": [{"bytes": _png(f)} for f in _frames(n, seed)], "fps": fps}


def _video_row(video, content: str = "<video>What moves?") -> dict:
    return {
        "data_source": "synthetic_video",
        "prompt": [{"role": "user", "content": content}],
        "images": None,
        "videos": [video],
        "reward_model": {"style": "rule", "ground_truth": "red"},
        "extra_info": {"split": "train", "index": 0},
    }


def _write(path, rows) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.fixture(scope="module")
def processor():
    return make_tiny_vlm_processor()


def _transformers_patchify(monkeypatch):
    """transformers' ``Qwen2VLVideoProcessor.patchify`` (pure torch), its module loaded under a private name with
    a stand-in for the torchvision import it never uses in ``patchify``; both leave ``sys.modules`` afterwards."""
    import transformers.models.qwen2_vl as pkg

    for name in ("torchvision", "torchvision.transforms", "torchvision.transforms.v2"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(
        sys.modules, "torchvision.transforms.v2.functional", types.ModuleType("torchvision.transforms.v2.functional")
    )
    name = "transformers.models.qwen2_vl._verl_video_check"
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(pkg.__file__), "video_processing_qwen2_vl.py")
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module.Qwen2VLVideoProcessor.patchify


@pytest.mark.parametrize("n", [2, 3, 4])
def test_video_patches_match_transformers_video_processor(n, processor, monkeypatch) -> None:
    ip = processor.image_processor
    frames = _frames(n, seed=n)
    ours = video_inputs_from_frames(ip, [frames])
    # the frames as the image processor resizes and normalises them: [n, C, H, W] from its (t-repeated) patches
    out = ip(images=frames, return_tensors="pt")
    _, gh, gw = out["image_grid_thw"][0].tolist()
    p, m = ip.patch_size, ip.merge_size
    per = out["pixel_values"].view(n, gh // m, gw // m, m, m, 3, ip.temporal_patch_size, p, p)[..., 0, :, :]
    stacked = per.permute(0, 5, 1, 3, 6, 2, 4, 7).reshape(n, 3, gh * p, gw * p)
    patchify = _transformers_patchify(monkeypatch)
    theirs, grid_t, grid_h, grid_w = patchify(None, stacked[None], p, m, ip.temporal_patch_size)
    assert ours["video_grid_thw"].tolist() == [[grid_t, grid_h, grid_w]] == [[(n + 1) // 2, gh, gw]]
    assert torch.equal(ours["pixel_values_videos"], theirs[0])


def test_frame_sampling_and_video_forms(tmp_path) -> None:
    assert sample_indices(3, 16) == [0, 1, 2] and sample_indices(7, 4) == [0, 2, 4, 6]
    frames = _frames(6)
    clip = process_video({"video": [_png(f) for f in frames], "fps": 3.0}, max_frames=3)
    assert len(clip.frames) == 3 and clip.fps == pytest.approx(1.5) and clip.frames[0].size == (52, 40)
    for k, f in enumerate(frames):
        f.save(tmp_path / f"{k:03d}.png")
    (tmp_path / "notes.txt").write_text("not a frame")
    clip = process_video(str(tmp_path), max_pixels=28 * 28)
    assert len(clip.frames) == 6 and clip.fps == 2.0 and clip.frames[0].size[0] * clip.frames[0].size[1] <= 784
    with pytest.raises(ValueError, match="neither a video file"):
        process_video(str(tmp_path / "notes.txt"))
    with pytest.raises(ValueError, match="'fps' must be a positive number"):
        process_video({"video": frames, "fps": 0})


def test_dataset_expands_video_placeholders(tmp_path, processor) -> None:
    frame_dir = tmp_path / "frames"
    frame_dir.mkdir()
    for k, f in enumerate(_frames(6, seed=1)):
        f.save(frame_dir / f"{k}.png")
    paths = [
        _write(tmp_path / "clip.parquet", [_video_row(_clip(4))]),
        _write(tmp_path / "dir.parquet", [_video_row(str(frame_dir), content="Before <video> after")]),
        _write(tmp_path / "image.parquet", colour_rows(1)),
    ]
    ds = RLHFDataset(paths, processor.tokenizer, {"max_prompt_length": 64, "video_max_frames": 4}, processor=processor)
    video_id = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    for item, frames_in in ((ds[0], 4), (ds[1], 6)):
        mm = item["multi_modal_inputs"]
        grid = mm["video_grid_thw"]
        assert grid.tolist() == [[2, 2, 4]]  # 4 kept frames -> 2 temporal patches; 40 x 52 -> 28 x 56 pixels
        assert mm["pixel_values_videos"].shape == (16, 1176) and "pixel_values" not in mm
        assert int((item["input_ids"] == video_id).sum()) == 16 // 4
        assert item["raw_prompt_ids"].count(video_id) == 1  # vLLM expands the one placeholder itself
        assert len(item["multi_modal_data"]["video"][0]) == 4 and "image" not in item["multi_modal_data"]
        # seconds per temporal patch: 2 frames at the sampled rate (2 fps scaled by kept / given frames)
        assert mm["second_per_grid_ts"].tolist() == pytest.approx([2 / (2.0 * 4 / frames_in)])
    assert "image_grid_thw" in ds[2]["multi_modal_inputs"] and "video" not in ds[2]["multi_modal_data"]


def test_dataset_video_errors(tmp_path, processor, monkeypatch) -> None:
    import verl.data.rl_dataset as rl_dataset

    config = {"max_prompt_length": 64}
    movie = tmp_path / "clip.mp4"
    movie.write_bytes(b"\x00" * 16)
    monkeypatch.setattr(rl_dataset, "video_decoder", lambda: None)
    bad = _write(
        tmp_path / "mp4.parquet", [dict(colour_rows(1)[0], videos=None), _video_row({"video": str(movie), "fps": 2.0})]
    )
    with pytest.raises(
        ValueError, match=r"row 1 column 'videos' video 0: video file .*clip\.mp4.* needs a video decoder"
    ):
        RLHFDataset(bad, processor.tokenizer, config, processor=processor)
    monkeypatch.undo()
    mismatch = _write(tmp_path / "count.parquet", [_video_row(_clip(2), content="<video> and <video>")])
    with pytest.raises(ValueError, match=r"row 0: the prompt has 2 <video> placeholders but column 'videos' holds 1"):
        RLHFDataset(mismatch, processor.tokenizer, config, processor=processor)
    with pytest.raises(ValueError, match="no processor was given"):
        RLHFDataset(mismatch, processor.tokenizer, config)


def test_dataset_decodes_video_files_with_opencv(tmp_path, processor) -> None:
    cv2 = pytest.importorskip("cv2")
    path = str(tmp_path / "clip.mp4")
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), 5.0, (56, 28))
    for k in range(5):
        writer.write(np.full((28, 56, 3), 40 * k, dtype=np.uint8))
    writer.release()
    data = _write(tmp_path / "f.parquet", [_video_row(path)])
    ds = RLHFDataset(data, processor.tokenizer, {"max_prompt_length": 64, "video_max_frames": 4}, processor=processor)
    item = ds[0]
    assert len(item["multi_modal_data"]["video"][0]) == 4
    assert item["multi_modal_inputs"]["video_grid_thw"].tolist() == [[2, 2, 4]]
    assert item["multi_modal_inputs"]["second_per_grid_ts"].tolist() == pytest.approx([2 / (5.0 * 4 / 5)])


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_rollout_log_probs_equal_actor_log_probs_with_videos(arch, tmp_path, processor) -> None:
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.rollout.hf_rollout import HFRollout

    image_row = dict(colour_rows(1, seed=4)[0], videos=None)
    text_row = dict(image_row, prompt=[{"role": "user", "content": "Name a colour."}], images=None)
    rows = [
        _video_row(_clip(3, seed=2, fps=1.0), content="<video>What colour is it?"),
        image_row,
        text_row,
        _video_row(_clip(4, seed=3, fps=4.0), content="First <video> then"),
    ]
    data = _write(tmp_path / "mixed.parquet", rows)
    ds = RLHFDataset(data, processor.tokenizer, {"max_prompt_length": 64}, processor=processor)
    model, _ = make_tiny_vlm(arch, processor=processor, seed=7)
    out = HFRollout(model, rollout_config(max_num_seqs=4)).generate_sequences(prompts_of(ds, range(4)))
    mm = list(out.non_tensor_batch["multi_modal_inputs"])
    assert [sorted(r) for r in mm][1:3] == [["image_grid_thw", "pixel_values"], []]
    out.meta_info.update(temperature=1.0, micro_batch_size=4)
    log_probs, _ = DataParallelPPOActor(actor_config(), model).compute_log_prob(out)
    mask = out.batch["response_mask"].bool()
    assert mask.sum() > 4
    assert torch.allclose(log_probs[mask], out.batch["rollout_log_probs"][mask], atol=1e-4)
    # micro-batches of one row each see the same positions and log-probs
    out.meta_info.update(micro_batch_size=1)
    single, _ = DataParallelPPOActor(actor_config(), model).compute_log_prob(out)
    assert torch.allclose(single[mask], log_probs[mask], atol=1e-5)
    # a video row without its video's grid is refused, not silently scored
    dropped = [dict(r) for r in mm]
    dropped[0] = {}
    with pytest.raises(ValueError, match="video placeholder tokens but its videos' grids need"):
        vision_forward_kwargs(model, out.batch["input_ids"], out.batch["attention_mask"], dropped)
