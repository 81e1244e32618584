"""A tiny random Qwen2-VL / Qwen2.5-VL and its processor, built locally for tests and examples (nothing downloads).

The tokenizer is the byte tokenizer of :mod:`verl.models.tiny` plus Qwen2-VL's vision special tokens; the image
processor is transformers' Qwen2-VL one with a small pixel budget (28 x 28 to 56 x 56: 1 to 4 merged patches, so
an image costs 1-4 placeholder tokens); the model is a 2-layer vision tower and a 2-layer language model.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from verl.models.tiny import make_byte_tokenizer

__all__ = ["VISION_TOKENS", "VLM_CHAT_TEMPLATE", "make_tiny_vlm", "make_tiny_vlm_processor"]

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

# ChatML-like, with Qwen2-VL's image / video blocks for {"type": "image"} / {"type": "video"} content parts
VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_tiny_vlm_processor(min_pixels: int = 28 * 28, max_pixels: int = 56 * 56) -> Any:
    """The byte tokenizer with the vision tokens, a Qwen2-VL image processor (patch 14, merge 2) and the chat
    template, as one processor (see :func:`verl.models.vlm.image_only_processor`)."""
    from transformers import Qwen2VLImageProcessorPil

    from verl.models.vlm import image_only_processor

    tokenizer = make_byte_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=min_pixels, max_pixels=max_pixels, patch_size=14, merge_size=2, temporal_patch_size=2
    )
    return image_only_processor(image_processor, tokenizer, VLM_CHAT_TEMPLATE)


def make_tiny_vlm(
    arch: str = "qwen2_vl", processor: Any = None, save_dir: str | None = None, seed: int = 0, hidden_size: int = 64
) -> tuple[torch.nn.Module, Any]:
    """A random ``Qwen2VLForConditionalGeneration`` (``arch="qwen2_vl"``) or
    ``Qwen2_5_VLForConditionalGeneration`` (``"qwen2_5_vl"``) in fp32, and its processor.

    With ``save_dir`` the model, tokenizer and image processor are written there, a model path like any other.
    """
    processor = processor or make_tiny_vlm_processor()
    tok = processor.tokenizer
    text = dict(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        # mrope_section: rotary half-dims for (temporal, height, width); they sum to head_dim / 2 = 8
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    ids = {name: tok.convert_tokens_to_ids(t) for name, t in zip(("start", "end", "image", "video"), VISION_TOKENS)}
    common = dict(
        text_config=text,
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["start"],
        vision_end_token_id=ids["end"],
        tie_word_embeddings=False,
    )
    if arch == "qwen2_vl":
        from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

        vision = dict(depth=2, embed_dim=32, hidden_size=hidden_size, num_heads=2, mlp_ratio=2, patch_size=14)
        config, cls = Qwen2VLConfig(vision_config=vision, **common), Qwen2VLForConditionalGeneration
    elif arch == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

        vision = dict(
            depth=2,
            hidden_size=32,
            out_hidden_size=hidden_size,
            intermediate_size=64,
            num_heads=2,
            patch_size=14,
            window_size=56,
            fullatt_block_indexes=[1],
        )
        config, cls = Qwen2_5_VLConfig(vision_config=vision, **common), Qwen2_5_VLForConditionalGeneration
    else:
        raise ValueError(f"unknown tiny VLM arch {arch!r}; expected 'qwen2_vl' or 'qwen2_5_vl'")
    config.text_config.pad_token_id = tok.pad_token_id
    config.text_config.eos_token_id = tok.eos_token_id
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    if save_dir is not None:
        os.makedirs(save_dir, exist_ok=True)
        model.save_pretrained(save_dir)
        tok.save_pretrained(save_dir)
        processor.image_processor.save_pretrained(save_dir)
    return model, processor
