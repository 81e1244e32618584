"""A multi-modal row through the model's processor: chat messages with ``<image>`` / ``<video>`` placeholders and
the row's stored images and videos -> prompt ids and the processor's inputs (what ``RLHFDataset`` and the SFT
dataset give the model). Images are read by :mod:`verl.data.vision_utils`, videos by
:mod:`verl.data.video_utils`.
"""

from __future__ import annotations

from typing import Any

from verl.data.video_utils import DEFAULT_VIDEO_MAX_FRAMES, process_videos
from verl.data.vision_utils import placeholder_content, process_image

__all__ = ["processor_inputs"]


def processor_inputs(
    processor: Any,
    messages: list[dict[str, Any]],
    images: list[Any] | None,
    where: str,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    add_generation_prompt: bool = True,
    videos: list[Any] | None = None,
    video_max_frames: int | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> tuple[list[int], dict[str, Any], dict[str, list[Any]], str]:
    """Chat ``messages`` with ``<image>`` / ``<video>`` placeholders and their stored ``images`` / ``videos`` through
    a multi-modal processor.

    Returns ``(input_ids, multi_modal_inputs, multi_modal_data, text)``: the prompt ids with each image (video)
    block expanded to its merged patch count; the processor's ``pixel_values [patches, dim]`` / ``image_grid_thw
    [images, 3]`` and, with videos, ``pixel_values_videos [video_patches, dim]`` / ``video_grid_thw [videos, 3]`` /
    ``second_per_grid_ts [videos]`` (``temporal_patch_size / fps``: the seconds of one temporal patch); the decoded
    media (``{"image": [RGB PIL images], "video": [[RGB PIL frames], ...]}``, keys present only when non-empty);
    and the rendered chat text (one placeholder token per image or video). Videos are read by
    :func:`verl.data.video_utils.process_video` (at most ``video_max_frames`` frames each). ``template_kwargs``:
    extra chat-template arguments (``data.apply_chat_template_kwargs``). Errors name ``where``.
    """
    from verl.models.vlm import MULTI_MODAL_INPUT_KEYS

    images = list(images or [])
    decoded = [process_image(img, min_pixels, max_pixels, where=f"{where} image {k}") for k, img in enumerate(images)]
    max_frames = DEFAULT_VIDEO_MAX_FRAMES if video_max_frames is None else int(video_max_frames)
    clips = process_videos(list(videos or []), min_pixels, max_pixels, max_frames, where=where)
    rendered = [{"role": m["role"], "content": placeholder_content(m["content"])} for m in messages]
    kwargs: dict[str, Any] = {}
    if decoded:
        kwargs["images"] = decoded
    if clips:
        kwargs["videos"] = [clip.frames for clip in clips]
    try:
        text = processor.apply_chat_template(
            rendered, add_generation_prompt=add_generation_prompt, tokenize=False, **(template_kwargs or {})
        )
        inputs = processor(text=[text], return_tensors="pt", **kwargs)
    except Exception as e:
        raise ValueError(f"{where}: the processor failed on the chat and its images/videos: {e}") from e
    mm_inputs = {k: inputs[k] for k in MULTI_MODAL_INPUT_KEYS if k in inputs}
    media: dict[str, list[Any]] = {}
    if decoded:
        media["image"] = decoded
    if clips:
        import torch

        temporal = int(getattr(getattr(processor, "image_processor", None), "temporal_patch_size", 2))
        mm_inputs["second_per_grid_ts"] = torch.tensor([temporal / clip.fps for clip in clips], dtype=torch.float32)
        media["video"] = [clip.frames for clip in clips]
    return inputs["input_ids"][0].tolist(), mm_inputs, media, text
