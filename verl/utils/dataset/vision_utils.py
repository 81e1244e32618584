"""Images of multi-modal rows: decoding the stored forms, size limits, and ``<image>`` placeholders -> chat content.

verl's vision datasets (geo3k and the like) store a row's images in a column (``data.image_key``, default
``images``) as a list whose items are any of: raw ``bytes``, a local file path, a ``PIL.Image``, or a dict with
``bytes`` (what Hugging Face ``datasets`` writes to parquet for an ``Image`` feature) or ``image`` (a path, bytes or a
PIL image) and optionally its own ``min_pixels`` / ``max_pixels``. The prompt's messages mark where each image goes
with ``<image>`` placeholders, in order. Upstream: ``verl/utils/dataset/vision_utils.py`` (``process_image``) and
``RLHFDataset._build_messages``.

Size limits follow Qwen2-VL's ``qwen_vl_utils.fetch_image``: an image with more than ``max_pixels`` pixels is scaled
down (aspect ratio kept) and one with fewer than ``min_pixels`` scaled up, before the model's image processor (which
then rounds the sides to its patch grid).
"""

from __future__ import annotations

import io
import math
import os
from typing import Any

__all__ = ["IMAGE_PLACEHOLDER", "VIDEO_PLACEHOLDER", "placeholder_content", "process_image", "processor_inputs"]

IMAGE_PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"


def _open(source: Any, where: str) -> Any:
    from PIL import Image

    if isinstance(source, Image.Image):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        try:
            return Image.open(io.BytesIO(bytes(source)))
        except Exception as e:
            raise ValueError(f"{where}: the image bytes do not decode as an image ({type(e).__name__}: {e})") from e
    if isinstance(source, (str, os.PathLike)):
        path = str(source)
        if path.startswith("file://"):
            path = path[len("file://") :]
        if path.startswith(("http://", "https://")):
            raise ValueError(f"{where}: remote image {path!r}: only local files, bytes and PIL images are read")
        if not os.path.isfile(path):
            raise ValueError(f"{where}: image file {path!r} does not exist")
        return Image.open(path)
    raise ValueError(
        f"{where}: an image must be bytes, a path, a PIL image or a dict with 'bytes' or 'image', "
        f"got {type(source).__name__}"
    )


def process_image(
    image: Any, min_pixels: int | None = None, max_pixels: int | None = None, where: str = "image"
) -> Any:
    """One stored image -> an RGB ``PIL.Image`` within ``[min_pixels, max_pixels]`` pixels.

    ``image``: bytes, a path, a PIL image, or ``{"bytes": ...}`` / ``{"image": ...}`` (a dict's own ``min_pixels`` /
    ``max_pixels`` win over the arguments). ``where`` names the row in error messages. Resizing keeps the aspect
    ratio: the scale is ``sqrt(max_pixels / (w * h))`` (or ``sqrt(min_pixels / (w * h))``), sides at least 1.
    """
    if isinstance(image, dict):
        # a parquet struct column gives every row the field, None where the row did not set it
        min_pixels = image["min_pixels"] if image.get("min_pixels") is not None else min_pixels
        max_pixels = image["max_pixels"] if image.get("max_pixels") is not None else max_pixels
        if image.get("bytes") is not None:
            source = image["bytes"]
        elif image.get("image") is not None:
            source = image["image"]
        elif image.get("path") is not None:
            source = image["path"]
        else:
            raise ValueError(f"{where}: an image dict needs 'bytes', 'image' or 'path', got keys {sorted(image)}")
    else:
        source = image
    img = _open(source, where)
    if img.mode != "RGB":
        img = img.convert("RGB")
    width, height = img.size
    pixels = width * height
    if max_pixels is not None and pixels > int(max_pixels):
        scale = math.sqrt(int(max_pixels) / pixels)
    elif min_pixels is not None and pixels < int(min_pixels):
        scale = math.sqrt(int(min_pixels) / pixels)
    else:
        return img
    size = (max(1, int(width * scale)), max(1, int(height * scale)))
    return img.resize(size)


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
) -> tuple[list[int], dict[str, Any], dict[str, list[Any]], str]:
    """Chat ``messages`` with ``<image>`` / ``<video>`` placeholders and their stored ``images`` / ``videos`` through
    a multi-modal processor.

    Returns ``(input_ids, multi_modal_inputs, multi_modal_data, text)``: the prompt ids with each image (video)
    block expanded to its merged patch count; the processor's ``pixel_values [patches, dim]`` / ``image_grid_thw
    [images, 3]`` and, with videos, ``pixel_values_videos [video_patches, dim]`` / ``video_grid_thw [videos, 3]`` /
    ``second_per_grid_ts [videos]`` (``temporal_patch_size / fps``: the seconds of one temporal patch); the decoded
    media (``{"image": [RGB PIL images], "video": [[RGB PIL frames], ...]}``, keys present only when non-empty);
    and the rendered chat text (one placeholder token per image or video). Videos are read by
    :func:`verl.utils.dataset.video_utils.process_video` (at most ``video_max_frames`` frames each). Errors name
    ``where``.
    """
    from verl.utils.dataset.video_utils import DEFAULT_VIDEO_MAX_FRAMES, process_videos
    from verl.utils.models.vlm import MULTI_MODAL_INPUT_KEYS

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
        text = processor.apply_chat_template(rendered, add_generation_prompt=add_generation_prompt, tokenize=False)
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


def placeholder_content(text: str) -> list[dict[str, str]] | str:
    """A message's text with ``<image>`` / ``<video>`` placeholders -> the chat template's content parts
    (``[{"type": "text", "text": ...}, {"type": "image"}, ...]``), in order; text without placeholders stays a
    string."""
    if IMAGE_PLACEHOLDER not in text and VIDEO_PLACEHOLDER not in text:
        return text
    parts: list[dict[str, str]] = []
    rest = text
    while rest:
        cuts = [(rest.find(tag), tag) for tag in (IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER) if tag in rest]
        if not cuts:
            parts.append({"type": "text", "text": rest})
            break
        pos, tag = min(cuts)
        if pos > 0:
            parts.append({"type": "text", "text": rest[:pos]})
        parts.append({"type": "image" if tag == IMAGE_PLACEHOLDER else "video"})
        rest = rest[pos + len(tag) :]
    return parts
