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

__all__ = ["IMAGE_PLACEHOLDER", "VIDEO_PLACEHOLDER", "placeholder_content", "process_image"]

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
