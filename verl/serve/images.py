"""Images in ``/v1/chat/completions``: OpenAI ``image_url`` content parts for a vision-language model.

A message's ``content`` may be a list of ``{"type": "text", "text": ...}`` and
``{"type": "image_url", "image_url": {"url": ...}}`` parts (OpenAI's chat format). The URL is read as:

* ``data:image/<fmt>;base64,<data>`` - always;
* a local file (``file:///abs/path`` or ``/abs/path``) - only under the server's ``--allowed-local-media-path``
  directory (vLLM's flag of the same name): a client must not make the server read arbitrary files;
* ``http(s)://`` - only with ``--allow-remote-images``; by default never fetched.

The images go through the model's processor with the chat template's image parts, exactly as the RL dataset does
(:class:`~verl.data.rl_dataset.RLHFDataset`), and each request carries its ``multi_modal_inputs`` to the
``hf`` engine. Images larger than the processor's pixel limit are scaled down by the processor as in training.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
from typing import Any

from verl.experimental.agent_loop.openai_schemas import ImagePart, ImageURL, ServeError

__all__ = ["ImagePart", "ImageURL", "load_image_url", "vision_chat_inputs"]  # the parts re-exported from schemas

# the largest image a request may send (decoded bytes), remote or inline
MAX_IMAGE_BYTES = 20 * 1024 * 1024


def _decode(data: bytes, field: str) -> Any:
    from PIL import Image

    if len(data) > MAX_IMAGE_BYTES:
        raise ServeError(400, f"{field}: the image is larger than {MAX_IMAGE_BYTES} bytes", field, "invalid_image")
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as e:
        raise ServeError(400, f"{field}: not a readable image ({type(e).__name__})", field, "invalid_image") from e
    return image.convert("RGB")


def load_image_url(
    url: str, field: str, allowed_local_media_path: str | None = None, allow_remote: bool = False
) -> Any:
    """The RGB ``PIL.Image`` an ``image_url`` names (see the module docstring for what is read); ``field`` names
    the part in errors (400)."""
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        if not header.endswith(";base64") or not payload:
            raise ServeError(400, f"{field}: a data URL must be data:image/...;base64,<data>", field, "invalid_image")
        try:
            return _decode(base64.b64decode(payload, validate=True), field)
        except (binascii.Error, ValueError) as e:
            raise ServeError(400, f"{field}: the data URL is not valid base64", field, "invalid_image") from e
    if url.startswith(("http://", "https://")):
        if not allow_remote:
            raise ServeError(
                400, f"{field}: remote image URLs are not fetched by this server (start it with --allow-remote-images)",
                field, "remote_image_disabled",
            )  # fmt: skip
        import urllib.request

        try:
            with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (http(s) only, checked above)
                return _decode(response.read(MAX_IMAGE_BYTES + 1), field)
        except OSError as e:
            raise ServeError(400, f"{field}: could not fetch the image ({e})", field, "invalid_image") from e
    path = url[len("file://") :] if url.startswith("file://") else url
    if not os.path.isabs(path):
        raise ServeError(400, f"{field}: expected a data URL, an absolute file path or http(s) URL", field)
    if allowed_local_media_path is None:
        raise ServeError(
            400, f"{field}: local image files are not read by this server (start it with --allowed-local-media-path)",
            field, "local_image_disabled",
        )  # fmt: skip
    root = os.path.realpath(allowed_local_media_path)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise ServeError(400, f"{field}: {path} is outside --allowed-local-media-path", field, "local_image_disabled")
    if not os.path.isfile(real):
        raise ServeError(400, f"{field}: no such file {path}", field, "invalid_image")
    with open(real, "rb") as f:
        return _decode(f.read(MAX_IMAGE_BYTES + 1), field)


def has_images(messages: list[Any]) -> bool:
    """Whether any message has an ``image_url`` part."""
    return any(isinstance(m.content, list) and any(isinstance(p, ImagePart) for p in m.content) for m in messages)


def vision_chat_inputs(
    processor: Any, messages: list[Any], allowed_local_media_path: str | None = None, allow_remote: bool = False
) -> tuple[list[int], dict[str, Any]]:
    """``(prompt ids, multi_modal_inputs)`` of chat ``messages`` with image parts, through ``processor`` (its chat
    template with ``{"type": "image"}`` parts, then the processor on the text and the images in order)."""
    from verl.models.vlm import MULTI_MODAL_INPUT_KEYS

    if processor is None:
        raise ServeError(400, "messages: this model does not take images (it has no image processor)", "messages")
    rendered, images = [], []
    for i, message in enumerate(messages):
        if isinstance(message.content, str):
            rendered.append({"role": message.role, "content": message.content})
            continue
        parts = []
        for j, part in enumerate(message.content):
            if isinstance(part, ImagePart):
                field = f"messages[{i}].content[{j}].image_url"
                images.append(load_image_url(part.image_url.url, field, allowed_local_media_path, allow_remote))
                parts.append({"type": "image"})
            else:
                parts.append({"type": "text", "text": part.text})
        rendered.append({"role": message.role, "content": parts})
    try:
        text = processor.apply_chat_template(rendered, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text], images=images, return_tensors="pt")
    except Exception as err:
        raise ServeError(400, f"messages: the processor rejected them: {err}", "messages") from err
    return inputs["input_ids"][0].tolist(), {k: inputs[k] for k in MULTI_MODAL_INPUT_KEYS if k in inputs}
