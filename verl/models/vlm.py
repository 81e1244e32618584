"""Vision-language models (Qwen2-VL / Qwen2.5-VL family): what the actor, the rollout and the loaders need to know.

* :func:`is_vision_language_model` - the module (under PEFT/FSDP wrappers) has a vision tower.
* :func:`vision_forward_kwargs` - the extra inputs of one forward over ``[bs, seq]`` tokens whose rows carry images:
  the rows' ``pixel_values`` concatenated in row order, their ``image_grid_thw``, the token-type ids the model needs
  to place its multi-modal rotary positions, and those positions themselves from the model's own
  ``get_rope_index`` (Qwen2-VL's M-RoPE: a ``[3, bs, seq]`` temporal/height/width index, Wang et al. 2024,
  "Qwen2-VL", section 2.1), computed on the whole sequence so that the rollout's prefill and the actor's forward see
  the same positions.
* :func:`pack_vision_inputs` - the same inputs for the packed (remove-padding) forward of those rows.
* :func:`freeze_vision_tower` - ``actor.freeze_vision_tower``.
* :func:`image_only_processor` - a Qwen2-VL processor without transformers' video processor, for installs without
  torchvision (transformers' video processors need it); :func:`load_processor` falls back to it. It still takes
  videos given as frames (:func:`video_inputs_from_frames`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

import torch

from verl.utils.errors import ConfigLineError

__all__ = [
    "MULTI_MODAL_INPUT_KEYS",
    "freeze_vision_tower",
    "image_only_processor",
    "is_vision_language_model",
    "config_has_vision",
    "load_processor",
    "processor_for_model",
    "multi_modal_token_types",
    "placeholder_token_ids",
    "unwrap_model",
    "pack_vision_inputs",
    "video_inputs_from_frames",
    "vision_forward_kwargs",
    "vision_tower",
]

logger = logging.getLogger(__name__)

# per-sample processor outputs the model's forward takes (concatenated over a batch's rows along dim 0)
MULTI_MODAL_INPUT_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw")


def unwrap_model(module: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under PEFT (``get_base_model``) and FSDP1 (``module``) wrappers."""
    seen = 0
    while seen < 4:
        seen += 1
        get_base = getattr(module, "get_base_model", None)
        if callable(get_base):
            module = get_base()
            continue
        inner = getattr(module, "_fsdp_wrapped_module", None)
        if isinstance(inner, torch.nn.Module):
            module = inner
            continue
        break
    return module


def is_vision_language_model(module: torch.nn.Module) -> bool:
    """True when the model's config has a ``vision_config`` (Qwen2-VL, Qwen2.5-VL, ...)."""
    config = getattr(unwrap_model(module), "config", None)
    return getattr(config, "vision_config", None) is not None


def vision_tower(module: torch.nn.Module) -> torch.nn.Module | None:
    """The vision encoder submodule (``model.visual`` in transformers 5, ``visual`` in older layouts) or None."""
    model = unwrap_model(module)
    for owner in (getattr(model, "model", None), model):
        visual = getattr(owner, "visual", None) if owner is not None else None
        if isinstance(visual, torch.nn.Module):
            return visual
    return None


def freeze_vision_tower(module: torch.nn.Module) -> int:
    """Stop gradients to the vision encoder (verl's ``actor.freeze_vision_tower``); returns the number of frozen
    parameter tensors. Raises :class:`~verl.utils.errors.ConfigLineError` (a ValueError) when the model has no
    vision tower."""
    visual = vision_tower(module)
    if visual is None:
        raise ConfigLineError(
            f"actor.freeze_vision_tower=true but {type(unwrap_model(module)).__name__} has no vision tower "
            "(expected a vision-language model such as Qwen2-VL)"
        )
    count = 0
    for param in visual.parameters():
        param.requires_grad_(False)
        count += 1
    return count


def multi_modal_token_types(input_ids: torch.Tensor, config: Any) -> torch.Tensor:
    """``mm_token_type_ids`` of ``input_ids [bs, seq]``: 1 at image placeholder tokens, 2 at video ones, else 0
    (what the processor returns for the prompt, extended here to responses)."""
    types = torch.zeros_like(input_ids)
    image_id = getattr(config, "image_token_id", None)
    video_id = getattr(config, "video_token_id", None)
    if image_id is not None:
        types = types.masked_fill(input_ids == int(image_id), 1)
    if video_id is not None:
        types = types.masked_fill(input_ids == int(video_id), 2)
    return types


def placeholder_token_ids(module: torch.nn.Module) -> list[int]:
    """The image / video placeholder token ids of a vision-language model (what a rollout must not sample)."""
    config = unwrap_model(module).config
    return [
        int(t)
        for t in (getattr(config, "image_token_id", None), getattr(config, "video_token_id", None))
        if t is not None
    ]


def _concat(rows: Sequence[dict[str, Any] | None], key: str) -> torch.Tensor | None:
    parts = [torch.as_tensor(r[key]) for r in rows if r is not None and r.get(key) is not None]
    return torch.cat(parts, dim=0) if parts else None


def _seconds_per_grid(rows: Sequence[dict[str, Any] | None]) -> torch.Tensor | None:
    """``second_per_grid_ts [videos]`` of the rows' videos in row order (1.0 for a video whose row has none), or None
    without videos: the seconds one temporal patch spans, which Qwen2.5-VL's rotary positions scale by."""
    parts = []
    for r in rows:
        if r is None or r.get("video_grid_thw") is None:
            continue
        videos = int(torch.as_tensor(r["video_grid_thw"]).shape[0])
        seconds = r.get("second_per_grid_ts")
        parts.append(torch.ones(videos) if seconds is None else torch.as_tensor(seconds, dtype=torch.float32))
    return torch.cat(parts) if parts else None


def vision_forward_kwargs(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    rows: Sequence[dict[str, Any] | None],
) -> dict[str, Any]:
    """Extra forward kwargs for ``input_ids``/``attention_mask`` ``[bs, seq]`` whose row ``i`` carries the
    processor outputs ``rows[i]`` (``pixel_values [patches_i, dim]``, ``image_grid_thw [images_i, 3]``,
    ``pixel_values_videos [video_patches_i, dim]``, ``video_grid_thw [videos_i, 3]``, optionally
    ``second_per_grid_ts [videos_i]``; None or ``{}`` for a text row).

    Returns ``{}`` when no row has images or videos (a text-only batch takes the plain path; placeholder tokens
    without them raise ValueError). Otherwise the image and video pairs concatenated in row order,
    ``mm_token_type_ids [bs, seq]`` (1 image, 2 video) and ``position_ids [3, bs, seq]`` from the model's
    ``get_rope_index`` (left padding is skipped through the mask; Qwen2.5-VL also gets ``second_per_grid_ts``).
    Raises ValueError when the image (video) placeholder token count does not match the images' (videos') grids.
    """
    if len(rows) != input_ids.shape[0]:
        raise ValueError(f"vision_forward_kwargs: {len(rows)} multi-modal rows for a batch of {input_ids.shape[0]}")
    model = unwrap_model(module)
    config = model.config
    if not any(r for r in rows):
        placeholders = (multi_modal_token_types(input_ids, config) > 0) & attention_mask.bool()
        if bool(placeholders.any()):
            raise ValueError(
                f"the batch holds {int(placeholders.sum())} image/video placeholder tokens but no row carries "
                "multi_modal_inputs; were the images dropped from the batch?"
            )
        return {}
    device = input_ids.device
    out: dict[str, Any] = {}
    for key in MULTI_MODAL_INPUT_KEYS:
        value = _concat(rows, key)
        if value is not None:
            out[key] = value.to(device)
    if "pixel_values" in out:
        out["pixel_values"] = out["pixel_values"].to(next(model.parameters()).dtype)
    if "pixel_values_videos" in out:
        out["pixel_values_videos"] = out["pixel_values_videos"].to(next(model.parameters()).dtype)
    token_types = multi_modal_token_types(input_ids, config)
    merge = int(getattr(config.vision_config, "spatial_merge_size", 1)) ** 2
    for kind, type_id, grid_key in (("image", 1, "image_grid_thw"), ("video", 2, "video_grid_thw")):
        expected = int(out[grid_key].prod(-1).sum()) // merge if grid_key in out else 0
        placed = int(((token_types == type_id) & attention_mask.bool()).sum())
        if expected != placed:
            raise ValueError(
                f"the batch holds {placed} {kind} placeholder tokens but its {kind}s' grids need {expected}; were "
                f"the multi-modal inputs split from their rows, or the prompt truncated through an {kind}?"
            )
    out["mm_token_type_ids"] = token_types
    seconds = _seconds_per_grid(rows)
    backbone = getattr(model, "model", model)
    get_rope_index = getattr(backbone, "get_rope_index", None)
    if callable(get_rope_index):
        extra: dict[str, Any] = {}
        if seconds is not None and "second_per_grid_ts" in inspect.signature(get_rope_index).parameters:
            extra["second_per_grid_ts"] = seconds.to(device)  # Qwen2.5-VL: temporal positions scale with time
        position_ids, _ = get_rope_index(
            input_ids,
            mm_token_type_ids=token_types,
            image_grid_thw=out.get("image_grid_thw"),
            video_grid_thw=out.get("video_grid_thw"),
            attention_mask=attention_mask,
            **extra,
        )
        out["position_ids"] = position_ids
    return out


def pack_vision_inputs(
    extra_inputs: dict[str, Any], indices: torch.Tensor, text_position_ids: torch.Tensor
) -> dict[str, Any]:
    """:func:`vision_forward_kwargs`' inputs for the packed row of the same batch (``use_remove_padding``).

    Packing (:func:`verl.utils.padding.pack_padded_batch`) keeps the rows in order and each row's tokens in order,
    so the concatenated ``pixel_values`` / ``image_grid_thw`` still meet their placeholders in the same order and
    pass unchanged. The per-token inputs are gathered at the packed tokens' flat indices: ``mm_token_type_ids
    [bs, seq] -> [1, total]``, and the M-RoPE positions ``[3, bs, seq] -> [3, 1, total]``, computed per padded row
    before packing so every sample keeps its own temporal/height/width index. The text positions
    ``text_position_ids [1, total]`` (restarting at 0 for each sample) are prepended, giving ``[4, 1, total]``:
    the layout transformers' Qwen2-VL / Qwen2.5-VL text model takes for packed input, where the first row marks
    the sequence boundaries for the block-diagonal (or flash-attention varlen) mask and the other three rotate.

    Args:
        extra_inputs: the output of :func:`vision_forward_kwargs` for the padded ``[bs, seq]`` batch.
        indices: ``[total]`` flat index ``row * seq + col`` of each packed token (``PackedBatch.indices``).
        text_position_ids: ``[1, total]`` per-sample positions of the packed tokens (``PackedBatch.position_ids``).
    """
    packed = dict(extra_inputs)
    types = extra_inputs.get("mm_token_type_ids")
    if types is not None:
        packed["mm_token_type_ids"] = types.reshape(-1).index_select(0, indices).unsqueeze(0)
    positions = extra_inputs.get("position_ids")
    if positions is not None:
        if positions.dim() != 3 or positions.shape[0] != 3:
            shape = tuple(positions.shape)
            raise ValueError(f"pack_vision_inputs: expected M-RoPE positions [3, bs, seq], got {shape}")
        rope = positions.reshape(3, -1).index_select(1, indices).unsqueeze(1)
        packed["position_ids"] = torch.cat([text_position_ids.to(rope).unsqueeze(0), rope], dim=0)
    return packed


# ------------------------------------------------------------------------------------------------------ processor
def video_inputs_from_frames(image_processor: Any, videos: Sequence[Sequence[Any]]) -> dict[str, torch.Tensor]:
    """Qwen2-VL video inputs from each video's frames (RGB PIL images of one size per video), computed with the
    image processor alone: ``pixel_values_videos [patches, C * T * P * P]`` and ``video_grid_thw [videos, 3]``.

    Each frame is resized and normalised by ``image_processor`` as an image would be; consecutive groups of
    ``T = temporal_patch_size`` frames then form one temporal patch (a last incomplete group is completed by
    repeating the last frame, as transformers' ``Qwen2VLVideoProcessor.patchify`` does), so a video of ``n`` frames
    has ``grid_t = ceil(n / T)`` and ``grid_t * grid_h * grid_w`` patches laid out like the video processor's:
    ``(t, h / merge, w / merge, merge, merge)`` patches of ``(C, T, P, P)`` features.
    """
    temporal = int(image_processor.temporal_patch_size)
    patch = int(image_processor.patch_size)
    all_patches: list[torch.Tensor] = []
    grids: list[list[int]] = []
    for k, frames in enumerate(videos):
        frames = list(frames)
        if not frames:
            raise ValueError(f"video {k} has no frames")
        out = image_processor(images=frames, return_tensors="pt")
        pixels, grid = torch.as_tensor(out["pixel_values"]), torch.as_tensor(out["image_grid_thw"])
        if not bool((grid == grid[0]).all()):
            raise ValueError(f"video {k}: its frames resize to different patch grids {grid.tolist()}")
        n, (_, grid_h, grid_w) = len(frames), grid[0].tolist()
        channels = pixels.shape[-1] // (temporal * patch * patch)
        # each image's patches hold the frame T times over the temporal axis: keep one copy
        per_frame = pixels.view(n, grid_h * grid_w, channels, temporal, patch, patch)[:, :, :, 0]
        if pad := -n % temporal:
            per_frame = torch.cat([per_frame, per_frame[-1:].expand(pad, *per_frame.shape[1:])], dim=0)
        grid_t = per_frame.shape[0] // temporal
        grouped = per_frame.view(grid_t, temporal, grid_h * grid_w, channels, patch, patch).permute(0, 2, 3, 1, 4, 5)
        all_patches.append(grouped.reshape(grid_t * grid_h * grid_w, channels * temporal * patch * patch))
        grids.append([grid_t, grid_h, grid_w])
    return {"pixel_values_videos": torch.cat(all_patches, dim=0), "video_grid_thw": torch.tensor(grids)}


def _image_only_processor_class() -> type:
    from transformers import Qwen2VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
        """Qwen2-VL's processor (placeholder expansion, ``mm_token_type_ids``, chat template) without transformers'
        video processor, which needs torchvision (CPU installs often lack it). Images behave exactly as with
        ``Qwen2VLProcessor``; videos (each a list of RGB frames of one size) are patchified from the image
        processor's frames (:func:`video_inputs_from_frames`) and each ``<|video_pad|>`` of the text is expanded
        to its video's merged patch count."""

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None, **kwargs):
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
            self.video_processor = None

        def _expand_video_tokens(self, text: Any, video_grid_thw: torch.Tensor) -> list[str]:
            texts = [text] if isinstance(text, str) else list(text)
            merge = int(self.image_processor.merge_size) ** 2
            counts = (video_grid_thw.prod(-1) // merge).tolist()
            found = sum(t.count(self.video_token) for t in texts)
            if found != len(counts):
                raise ValueError(f"the text holds {found} {self.video_token} tokens for {len(counts)} videos")
            queue = iter(counts)
            expanded = []
            for t in texts:
                pieces = t.split(self.video_token)
                expanded.append(pieces[0] + "".join(self.video_token * next(queue) + p for p in pieces[1:]))
            return expanded

        def __call__(self, images: Any = None, text: Any = None, videos: Any = None, **kwargs: Any) -> Any:
            if videos is None or len(videos) == 0:
                return super().__call__(images=images, text=text, **kwargs)
            video_inputs = video_inputs_from_frames(self.image_processor, videos)
            out = super().__call__(
                images=images, text=self._expand_video_tokens(text, video_inputs["video_grid_thw"]), **kwargs
            )
            tensors = kwargs.get("return_tensors")
            for key, value in video_inputs.items():
                out[key] = value if tensors == "pt" else value.numpy()
            return out

    return ImageOnlyQwen2VLProcessor


_PROCESSOR_CLASS: type | None = None


def image_only_processor(image_processor: Any, tokenizer: Any, chat_template: str | None = None) -> Any:
    """An :class:`ImageOnlyQwen2VLProcessor` from an image processor and a tokenizer (one class per process)."""
    global _PROCESSOR_CLASS
    if _PROCESSOR_CLASS is None:
        _PROCESSOR_CLASS = _image_only_processor_class()
    return _PROCESSOR_CLASS(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template or tokenizer.chat_template
    )


def config_has_vision(path: str) -> bool:
    """Whether the model directory's ``config.json`` declares a ``vision_config`` (read without transformers)."""
    import json
    import os

    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        return False
    with open(config_file, encoding="utf-8") as f:
        return json.load(f).get("vision_config") is not None


def processor_for_model(model_path: str, tokenizer: Any = None, trust_remote_code: bool = False) -> Any:
    """The processor of a vision-language model at ``model_path`` (a name the loader resolves), None for a text
    model (whose directory is not searched for a processor at all); ``trust_remote_code`` lets a repository's own
    processor code run (``data.trust_remote_code``)."""
    from verl.models.loader import resolve_model_path
    from verl.models.remote_code import trust_remote_code_for

    local = resolve_model_path(model_path, require_weights=False)
    if not config_has_vision(local):
        return None
    trust = trust_remote_code_for(local, trust_remote_code, "data.trust_remote_code")
    processor = load_processor(local, tokenizer, **({"trust_remote_code": True} if trust else {}))
    if processor is None:
        raise ValueError(f"{model_path} is a vision-language model but no processor could be loaded from {local}")
    return processor


def check_image_patch_size(image_patch_size: int | None, processor: Any) -> None:
    """``data.image_patch_size`` (upstream verl's key) against the processor's patch size.

    Upstream resizes images to a grid of ``image_patch_size``-pixel patches before its processor sees them; here the
    processor resizes them to its own patch grid, which is the same thing when the two sizes agree. A size that
    disagrees would ask for a grid the model does not use: a ``ValueError`` naming both. ``None``, a text model (no
    processor) or a processor without a patch size: nothing to check.
    """
    if image_patch_size is None or processor is None:
        return
    patch = getattr(getattr(processor, "image_processor", None), "patch_size", None)
    if patch is not None and int(patch) != int(image_patch_size):
        raise ValueError(
            f"data.image_patch_size={image_patch_size}: the model's processor uses {patch}-pixel patches and resizes "
            f"images to that grid itself; set data.image_patch_size={patch} or null"
        )


def load_processor(path: str, tokenizer: Any = None, **kwargs: Any) -> Any:
    """The multi-modal processor of a model directory (``hf_processor``), or None for a text-only model.

    Where ``AutoProcessor`` fails only because the video processor cannot be built (no torchvision), a Qwen2-VL
    family model still gets an image-only processor from its saved image processor and ``tokenizer``.
    """
    from verl.utils.tokenizer import hf_processor

    try:
        processor = hf_processor(path, **kwargs)
    except ImportError as e:  # a sub-processor's backend is missing (torchvision for the video processor)
        logger.info("AutoProcessor for %s needs a missing backend (%s); trying an image-only processor", path, e)
        processor = None
    if processor is not None:
        return processor
    try:
        from transformers import AutoConfig, AutoImageProcessor

        config = AutoConfig.from_pretrained(path, trust_remote_code=bool(kwargs.get("trust_remote_code", False)))
        if getattr(config, "vision_config", None) is None:
            return None
        image_processor = AutoImageProcessor.from_pretrained(path)
    except (OSError, ValueError, ImportError) as e:
        logger.info("no image processor for %s (%s)", path, e)
        return None
    if tokenizer is None:
        from verl.models.loader import load_tokenizer

        tokenizer = load_tokenizer(path)
    return image_only_processor(image_processor, tokenizer)
