"""``actor_rollout_ref.model.use_fused_kernels``: the actor's log-probs and entropy without ``[batch, seq, vocab]``
logits.

The model runs its usual forward (so FSDP2's hooks on the root module gather and free the embedding, the final
norm and the LM head exactly as in the plain path, and PEFT wrappers, gradient checkpointing and compiled layers
are untouched), but for the duration of the call the LM head's ``forward`` is replaced by one that feeds its input,
the final hidden states of the kept positions, straight into
:func:`~verl.utils.kernel.linear_cross_entropy.linear_logprobs_entropy` with the head's own (gathered) weight and
bias. The head's matmul over the whole vocabulary is never run; the model's "logits" output is the per-token
log-prob ``[bs, kept, 1]``, and the entropy (and ``sum pi^2``) come back beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from verl.models.loader import forward_logits, forward_logits_at, head_forward_replaced
from verl.utils.kernel.linear_cross_entropy import linear_logprobs_entropy

FUSED_KEY = "actor_rollout_ref.model.use_fused_kernels"


def output_head(module: torch.nn.Module, key: str = FUSED_KEY) -> torch.nn.Module:
    """The LM head of a transformers causal LM (through PEFT and FSDP2 wrappers), checked for the fused path.

    Raises ValueError naming ``key`` (the config key that asked for the fused head, :data:`FUSED_KEY` for the
    actor) when the model has no separable linear head: no ``get_output_embeddings()``, a head with LoRA adapters,
    or logits post-processed after the head (Gemma-2's ``final_logit_softcapping``, Cohere's ``logit_scale``).
    """
    get_head = getattr(module, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise ValueError(
            f"{key}=true needs a transformers causal LM whose get_output_embeddings() is a linear LM head; "
            f"{type(module).__name__} has none: set it to false"
        )
    if hasattr(head, "base_layer") or hasattr(head, "lora_A"):
        raise ValueError(
            f"{key}=true computes the LM head from its weight, and this head carries LoRA adapters: leave "
            "lm_head out of model.target_modules or set use_fused_kernels=false"
        )
    config = getattr(module, "config", None)
    get_text = getattr(config, "get_text_config", None)
    configs = [config, get_text()] if callable(get_text) else [config]  # a VLM's language part has its own
    for cfg in configs:
        for name in ("final_logit_softcapping", "logit_scale"):
            if getattr(cfg, name, None) not in (None, 1.0):
                raise ValueError(
                    f"{key}=true: the model post-processes its logits ({name}={getattr(cfg, name)}), which the "
                    "fused head does not reproduce; set use_fused_kernels=false"
                )
    return head


def _select_kept(hidden: torch.Tensor, seqlen: int, logits_to_keep: int | torch.Tensor | None) -> torch.Tensor:
    """The kept positions of ``hidden [bs, n, H]``: as given when the model already applied ``logits_to_keep``,
    else selected here (a model whose forward has no ``logits_to_keep``)."""
    if logits_to_keep is None or hidden.shape[1] != seqlen:
        return hidden
    if isinstance(logits_to_keep, int):
        return hidden[:, -logits_to_keep:] if logits_to_keep > 0 else hidden
    if logits_to_keep.numel() == seqlen:
        return hidden
    return hidden.index_select(1, logits_to_keep)


def fused_logprobs_forward(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    labels: torch.Tensor,
    temperature: float,
    calculate_entropy: bool,
    entropy_requires_grad: bool,
    logits_to_keep: int | torch.Tensor | None = None,
    extra_inputs: Mapping[str, Any] | None = None,
    calculate_sum_pi_squared: bool = False,
    key: str = FUSED_KEY,
    flat_positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Log-probs of ``labels`` (and entropies) at the kept positions of one forward of ``module``.

    Args:
        module: a transformers causal LM (PEFT- and FSDP2-wrapped ones too), see :func:`output_head`.
        input_ids, attention_mask, position_ids: ``[bs, seq]`` model inputs, as for ``forward_logits``.
        labels: ``[bs, kept]`` the token scored at each kept position (any valid id where nothing is scored).
        temperature: logit divisor.
        calculate_entropy: also return the entropy; ``entropy_requires_grad`` keeps it differentiable.
        logits_to_keep: the last N positions or a 1-D tensor of positions (None: all ``seq`` positions).
        extra_inputs: further model inputs (a VLM's images).
        calculate_sum_pi_squared: also return ``sum_v pi(v)^2`` (no gradient).
        key: the config key named in refusals and errors (the SFT trainer passes its own).
        flat_positions: instead of ``logits_to_keep``, the K kept positions as flat indices ``row * seq + col``
            (packed rows keep different columns in each row, :func:`~verl.models.loader.forward_logits_at`);
            ``labels`` is then ``[1, K]``.

    Returns:
        ``(log_probs, entropy | None, sum_pi_squared | None)``, each ``[bs, kept]`` (``[1, K]``) float32.
    """
    head = output_head(module, key)
    seqlen = input_ids.shape[1]
    side: dict[str, torch.Tensor | None] = {}

    def fused_head(hidden: torch.Tensor) -> torch.Tensor:
        hidden = _select_kept(hidden, seqlen, logits_to_keep)
        if hidden.shape[:2] != labels.shape:
            raise ValueError(
                f"{key}: the LM head received hidden states {tuple(hidden.shape)} for labels "
                f"{tuple(labels.shape)}; the model's forward does not end in its LM head as expected"
            )
        logp, ent, sq = linear_logprobs_entropy(
            hidden, head.weight, labels, temperature, bias=head.bias, with_sum_pi_squared=calculate_sum_pi_squared
        )
        side["entropy"] = (ent if entropy_requires_grad else ent.detach()) if calculate_entropy else None
        side["sum_pi_squared"] = sq
        return logp.unsqueeze(-1)

    if flat_positions is not None:
        out = forward_logits_at(
            module, input_ids, attention_mask, position_ids, flat_positions, extra_inputs, head_forward=fused_head
        )
    else:
        with head_forward_replaced(head, fused_head):
            out = forward_logits(module, input_ids, attention_mask, position_ids, logits_to_keep, extra_inputs)
    if "entropy" not in side:
        raise RuntimeError(f"{key}: {type(module).__name__}'s forward never called its LM head")
    return out[..., 0], side["entropy"], side["sum_pi_squared"]
