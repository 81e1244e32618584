"""Tiny models and a byte-level tokenizer built locally, for tests, examples and benchmarks.

Nothing here downloads: the tokenizer is made from the 256 byte values plus a few special tokens (one token per
byte, as in the benchmark's config S), and the models are random transformers models built from a config.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast, Qwen2Config

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")

# A minimal chat template (ChatML-like) so datasets with chat messages work with the byte tokenizer.
BYTE_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (Radford et al. 2019): printable Latin-1 bytes map to
    themselves, the others to code points from 256 up, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
    printable += list(range(ord("\xae"), ord("\xff") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def make_byte_tokenizer(save_dir: str | None = None, with_pad: bool = True) -> PreTrainedTokenizerFast:
    """Build a byte-level tokenizer: ids 0..255 are the raw bytes, then ``<pad>``, ``<bos>``, ``<eos>``.

    Every UTF-8 string round-trips exactly and encodes to ``len(s.encode())`` tokens. With ``with_pad=False`` the
    tokenizer has no pad token (to test code paths that must cope with that).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    # GPT-2's byte-level alphabet gives each byte a printable character; token id = byte value. Decoding maps the
    # characters back to bytes and replaces only the invalid UTF-8 bytes (so rewards on decoded text still see the
    # valid characters of a response that also holds stray bytes).
    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    byte_to_char = _bytes_to_unicode()
    assert set(byte_to_char.values()) == set(byte_chars)
    vocab = {byte_to_char[b]: b for b in range(256)}
    for offset, special in enumerate(SPECIAL_TOKENS):
        vocab[special] = 256 + offset
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>" if with_pad else None,
    )
    hf.chat_template = BYTE_CHAT_TEMPLATE
    if save_dir is not None:
        os.makedirs(save_dir, exist_ok=True)
        hf.save_pretrained(save_dir)
    return hf


@dataclass
class TinyModelSpec:
    """Shape of a tiny random causal LM. The defaults are small enough for unit tests on one CPU thread."""

    arch: str = "llama"  # llama | qwen2 | qwen3 (per-head q/k RMS norms) | mistral (no sliding window)
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 512
    tie_word_embeddings: bool = False
    vocab_size: int = 256 + len(SPECIAL_TOKENS)


def make_tiny_causal_lm(
    spec: TinyModelSpec | None = None, save_dir: str | None = None, seed: int = 0, tokenizer=None
) -> torch.nn.Module:
    """Build a random Llama-, Qwen2-, Qwen3- or Mistral-style causal LM from ``spec`` (fp32, eval mode off).

    If ``save_dir`` is given, the model (safetensors) and a byte tokenizer are written there, so the directory can
    be used anywhere a model path is accepted.
    """
    spec = spec or TinyModelSpec()
    tokenizer = tokenizer or make_byte_tokenizer()
    common = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        intermediate_size=spec.intermediate_size,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if spec.arch == "llama":
        config = LlamaConfig(**common)
    elif spec.arch == "qwen2":
        config = Qwen2Config(**common)
    elif spec.arch == "qwen3":
        from transformers import Qwen3Config

        # Qwen3Config's head_dim defaults to 128 (the real models'); a tiny model splits its hidden size instead
        config = Qwen3Config(**common, head_dim=spec.hidden_size // spec.num_attention_heads)
    elif spec.arch == "mistral":
        from transformers import MistralConfig

        head_dim = spec.hidden_size // spec.num_attention_heads  # MistralConfig's default is 128
        config = MistralConfig(**common, head_dim=head_dim, sliding_window=None)
    else:
        raise ValueError(f"unknown tiny model arch {spec.arch!r}; expected 'llama', 'qwen2', 'qwen3' or 'mistral'")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if save_dir is not None:
        os.makedirs(save_dir, exist_ok=True)
        model.save_pretrained(save_dir)
        tokenizer.save_pretrained(save_dir)
    return model


def randomize_norm_weights(model: torch.nn.Module, seed: int = 0, low: float = 0.5, high: float = 1.5) -> None:
    """Draw every RMS norm weight of ``model`` from ``U[low, high)`` (in place, seeded): transformers initialises
    them to ones, under which a test cannot tell one norm's weight from another's (e.g. Qwen3's q and k norms)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, module in model.named_modules():
            if name.endswith("norm") and isinstance(getattr(module, "weight", None), torch.Tensor):
                module.weight.copy_(torch.empty(module.weight.shape).uniform_(low, high, generator=gen))


def make_tiny_model_dir(save_dir: str, spec: TinyModelSpec | None = None, seed: int = 0) -> str:
    """Write a tiny random model and its byte tokenizer to ``save_dir`` and return the path."""
    make_tiny_causal_lm(spec=spec, save_dir=save_dir, seed=seed)
    return save_dir
