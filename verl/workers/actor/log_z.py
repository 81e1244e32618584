"""FlowRL's ``log Z(x)`` of each row of a micro-batch: the log Z head (:mod:`verl.models.log_z_head`) on the mean
final hidden state of the row's prompt.

The recipe takes those hidden states from the slice of the full sequence's forward that covers the prompt. Under
causal attention a prompt position never sees the response, so a forward of the prompt alone gives the same
states; this module runs that prompt-only forward, which works the same whatever path scores the response
(padded, packed, fused head, prefix grouper), at the cost of a second forward over the prompt tokens.

The forward is the model's own (so FSDP2's hooks gather and free the root's parameters as usual), with the LM
head's ``forward`` replaced for the call by one that takes the final (normed) hidden states, pools them and runs
the log Z head there, inside the root's forward, where the root's parameters, the head's among them, are gathered;
log Z leaves the model as its output, so the backward gathers them again through the same hooks. No logits are
computed.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.models.loader import forward_logits, head_forward_replaced
from verl.models.log_z_head import log_z_head_of


def pooled_prompt_states(hidden: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``hidden [bs, P, H]`` over each row's prompt positions but its last (as the recipe pools:
    ``hidden[:, :-1]`` under ``prompt_mask[:, :-1]``), ``[bs, H]``; a row with nothing to pool gives zeros."""
    states, mask = hidden[:, :-1], prompt_mask[:, :-1].unsqueeze(-1).to(hidden.dtype)
    return (states * mask).sum(1) / mask.sum(1).clamp_min(1.0)


def prompt_log_z(module: torch.nn.Module, micro: TensorDict) -> torch.Tensor:
    """``log Z [bs]`` of a micro-batch's prompts (module docstring): the first ``seqlen - response_len`` columns of
    ``input_ids``, ``attention_mask`` and ``position_ids`` (when given) ``[bs, seqlen]``, with ``responses``
    ``[bs, response_len]`` telling where the prompt ends. Differentiable in the model and the head."""
    prompt_len = micro["input_ids"].shape[1] - micro["responses"].shape[-1]
    ids, mask = micro["input_ids"][:, :prompt_len], micro["attention_mask"][:, :prompt_len]
    positions = micro["position_ids"][:, :prompt_len] if "position_ids" in micro.keys() else None
    get_head = getattr(module, "get_output_embeddings", None)
    lm_head = get_head() if callable(get_head) else None
    if lm_head is None:
        raise ValueError(
            f"loss_mode=flowrl reads the final hidden states at the LM head of a transformers causal LM; "
            f"{type(module).__name__} has no get_output_embeddings()"
        )
    config = getattr(module, "config", None)
    for name in ("final_logit_softcapping", "logit_scale"):
        if getattr(config, name, None) not in (None, 1.0):
            raise ValueError(
                f"loss_mode=flowrl: {type(module).__name__} post-processes what its LM head returns ({name}="
                f"{getattr(config, name)}), through which log Z is returned; FlowRL is not available for this model"
            )
    z_head = log_z_head_of(module)

    def log_z_at_head(hidden: torch.Tensor) -> torch.Tensor:
        log_z = z_head(pooled_prompt_states(hidden, mask)).squeeze(-1)
        # returned as the model's "logits" [bs, P, 1], not kept aside: FSDP2 gathers the root's parameters for the
        # backward through the hooks on the root's outputs, and the head's parameters are the root's
        return log_z[:, None, None].expand(-1, hidden.shape[1], 1)

    with head_forward_replaced(lm_head, log_z_at_head):
        stand_in = forward_logits(module, ids, mask, positions)
    return stand_in[:, 0, 0].float()
