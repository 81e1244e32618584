"""Model FLOPs of a decoder-only transformer, and MFU: the model's FLOPs over the device's peak.

Model FLOPs utilisation (MFU, Chowdhery et al. 2022, "PaLM", appendix B) is the rate of the FLOPs the model needs
(not counting recomputation) over the device's peak. For one token in a sequence of ``T`` tokens, training (forward
+ backward) needs

    6 N + 12 L H Q T

FLOPs: ``N`` matmul parameters (every linear layer, the LM head included; an embedding lookup is no matmul), each
used in one multiply-add forward and two backward (Kaplan et al. 2020: ``C ~ 6N``), plus the attention scores and
the weighted sum (``L`` layers, ``H`` query heads of size ``Q``: ``2 x 2 L H Q T`` forward, three times that with
the backward). The attention term counts the full ``T x T`` square as PaLM and verl's ``FlopsCounter`` do. A
forward pass alone (log-probs) is one third of this.

The peak is a fact of the hardware: :func:`~verl.hardware.peak.peak_flops` (a GPU's datasheet rate, else
measured at the model's matmul shapes, :func:`model_matmul_shapes`). It is re-exported here with :class:`PeakFlops`
so the two halves of MFU are called from one module (``flops_counter.peak_flops`` in the workers).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from verl.hardware.peak import PeakFlops, Shape, peak_flops

__all__ = [
    "PeakFlops",
    "forward_flops",
    "matmul_parameters",
    "mfu",
    "model_matmul_shapes",
    "peak_flops",
    "training_flops",
]


def _get(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def matmul_parameters(config: Any) -> int:
    """``N``: the parameters of every linear layer of a Llama/Qwen2/Mistral-style decoder (gated MLP) and its LM
    head, from a transformers config (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``num_key_value_heads``, ``head_dim``, ``intermediate_size``, ``vocab_size``). Biases are left out."""
    hidden = int(config.hidden_size)
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    kv_heads = int(_get(config, "num_key_value_heads", default=heads))
    head_dim = int(_get(config, "head_dim", default=hidden // heads))
    inter = int(_get(config, "intermediate_size", default=4 * hidden))
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o; k, v
    mlp = 3 * hidden * inter  # gate, up, down
    return layers * (attention + mlp) + hidden * int(config.vocab_size)


def training_flops(config: Any, seq_lens: Iterable[int]) -> float:
    """FLOPs of one forward + backward over sequences of the given lengths: ``sum_s (6 N s + 12 L H Q s^2)``."""
    n = matmul_parameters(config)
    heads = int(config.num_attention_heads)
    head_dim = int(_get(config, "head_dim", default=int(config.hidden_size) // heads))
    attn = 12 * int(config.num_hidden_layers) * heads * head_dim
    lens = [int(s) for s in seq_lens]
    return float(sum(6 * n * s + attn * s * s for s in lens))


def forward_flops(config: Any, seq_lens: Iterable[int]) -> float:
    """FLOPs of a forward pass only (log-probs, reference): a third of :func:`training_flops`."""
    return training_flops(config, seq_lens) / 3.0


def model_matmul_shapes(config: Any, tokens: int) -> list[Shape]:
    """The model's own large matmuls on a micro-batch of ``tokens`` tokens, as ``(M, K, N)``:

    - query projection ``[tokens, hidden] x [hidden, heads * head_dim]``;
    - MLP gate/up ``[tokens, hidden] x [hidden, intermediate]`` and down ``[tokens, intermediate] x
      [intermediate, hidden]``;
    - LM head ``[tokens, hidden] x [hidden, vocab]``;
    - the weight gradients of the MLP up and the LM head (``[hidden, tokens] x [tokens, out]``: the token count is
      the inner dimension there, which a backward pass runs at its own rate).

    Duplicates are dropped; order is kept.
    """
    hidden = int(config.hidden_size)
    heads = int(config.num_attention_heads)
    head_dim = int(_get(config, "head_dim", default=hidden // heads))
    inter = int(_get(config, "intermediate_size", default=4 * hidden))
    vocab = int(config.vocab_size)
    m = max(int(tokens), 1)
    shapes = [(m, hidden, heads * head_dim), (m, hidden, inter), (m, inter, hidden), (m, hidden, vocab)]
    shapes += [(hidden, m, inter), (hidden, m, vocab)]
    return list(dict.fromkeys(shapes))


def mfu(flops: float, seconds: float, peak_flops: float, n_devices: int = 1) -> float:
    """Model FLOPs utilisation: ``flops / (seconds * peak_flops * n_devices)`` (0 when nothing was timed)."""
    if seconds <= 0 or peak_flops <= 0:
        return 0.0
    return flops / (seconds * peak_flops * max(n_devices, 1))
