"""Conversions between the padded batch layout and the packed one of upstream verl's model engines
(``verl.workers.utils.padding``, v0.9).

Padded: ``input_ids`` / ``attention_mask`` / ``position_ids`` ``[bs, seq_len]`` (prompt left-padded, response
right-padded), per-response tensors ``[bs, response_len]``. Packed: the valid tokens of every row, one after
another, as a jagged nested tensor (``torch.nested``, ``layout=torch.jagged``) whose ``offsets()`` are the
cumulative sequence lengths ``cu_seqlens`` ``[bs + 1]``. A model run on the packed ids predicts token ``t + 1`` at
position ``t``, so the outputs for a response of length ``r`` ending at packed offset ``e`` are the rows
``e - r - 1 .. e - 2`` (shifted left by one).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu

__all__ = [
    "build_attention_mask_from_nested",
    "embeds_padding_2_no_padding",
    "left_right_2_no_padding",
    "no_padding_2_padding",
    "response_from_nested",
    "response_to_nested",
]

# per-token fields shaped like input_ids (plus trailing dims) that travel packed with them when present
_PACKED_ALONG = ("routed_experts", "teacher_logprobs", "teacher_ids")


def _jagged(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _pack(padded: torch.Tensor, mask: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``padded`` ``[bs, seq_len, *]`` -> jagged ``[bs, j, *]`` of the positions where ``mask`` ``[bs, seq_len]`` is
    set, with the given ``offsets`` ``[bs + 1]``."""
    return torch.nested.nested_tensor_from_jagged(padded[mask], offsets=offsets)


def left_right_2_no_padding(data: TensorDict) -> TensorDict:
    """Pack a padded batch in place and return it.

    Needs ``input_ids``, ``attention_mask``, ``response_mask``, ``position_ids`` (``[bs, seq_len]``, or
    ``[bs, k, seq_len]`` for multi-axis rotary positions). ``input_ids`` and ``position_ids`` become jagged nested
    tensors of the valid tokens (``attention_mask`` set), ``loss_mask`` is a copy of ``response_mask`` (still
    padded, as are ``attention_mask`` and every other tensor, e.g. old log-probs and advantages);
    ``routed_experts``, ``teacher_logprobs`` and ``teacher_ids`` (``[bs, seq_len, *]``) are packed too when
    present. Non-tensor entries added: ``max_seq_len``, ``max_response_len`` (the padded widths) and ``indices``
    (the flat positions ``row * seq_len + col`` of the valid tokens, ``[nnz]``).
    """
    missing = [k for k in ("input_ids", "attention_mask", "response_mask", "position_ids") if k not in data.keys()]
    if missing:
        raise KeyError(f"left_right_2_no_padding needs {missing} in the batch; keys are {list(data.keys())}")
    input_ids = data.pop("input_ids")
    mask = data["attention_mask"].bool()
    position_ids = data["position_ids"]
    tu.assign_non_tensor_data(data, "max_seq_len", input_ids.shape[1])
    tu.assign_non_tensor_data(data, "max_response_len", data["response_mask"].shape[1])
    tu.assign_non_tensor_data(data, "indices", torch.nonzero(mask.flatten(), as_tuple=False).flatten())
    lengths = mask.sum(dim=1)
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    data["input_ids"] = _pack(input_ids, mask, offsets)
    if position_ids.dim() == 2:
        data["position_ids"] = _pack(position_ids, mask, offsets)
    else:  # [bs, k, seq_len]: keep the k axes of every valid token together
        data["position_ids"] = _jagged([position_ids[i][:, mask[i]] for i in range(mask.shape[0])])
    data["loss_mask"] = data["response_mask"]
    for key in _PACKED_ALONG:
        value = data.get(key, None)
        if isinstance(value, torch.Tensor) and not value.is_nested:
            data[key] = _pack(value, mask, offsets)
    return data


def no_padding_2_padding(tensor: torch.Tensor, data: TensorDict) -> torch.Tensor:
    """The response part of a packed model output, padded: ``[bs, max_response_len, *]``.

    ``tensor`` is the output over the packed sequences (a nested tensor or its values ``[nnz, *]``); ``data`` has
    ``prompts`` and ``responses`` (nested, with ``max_response_len`` as non-tensor data or else the longest
    response) or padded ``prompts`` / ``responses`` with ``attention_mask`` (prompt and response lengths are then
    the mask's sums over the prompt and response columns). Every prompt must be non-empty.
    """
    values = tensor.values() if tensor.is_nested else tensor
    prompts, responses = data["prompts"], data["responses"]
    if prompts.is_nested:
        prompt_lens = prompts.offsets().diff()
        response_lens = responses.offsets().diff()
        width = tu.get_non_tensor_data(data=data, key="max_response_len", default=-1)
        if width < 0:
            width = int(response_lens.max().item())
    else:
        attention_mask = data["attention_mask"]
        prompt_lens = attention_mask[:, : prompts.shape[1]].sum(dim=1)
        response_lens = attention_mask[:, prompts.shape[1] :].sum(dim=1)
        width = responses.shape[1]
    if prompt_lens.eq(0).any():
        raise ValueError(
            "no_padding_2_padding: every prompt needs a token (the shift reads one before the response), got "
            f"prompt lengths {prompt_lens.tolist()}"
        )
    ends = (prompt_lens + response_lens).cumsum(0)
    if int(ends[-1]) != values.shape[0]:
        raise ValueError(f"no_padding_2_padding: {values.shape[0]} packed rows but the lengths sum to {int(ends[-1])}")
    trailing = (0, 0) * (values.dim() - 1)
    rows = []
    for resp_len, end in zip(response_lens.tolist(), ends.tolist(), strict=True):
        rows.append(F.pad(values[end - resp_len - 1 : end - 1], (*trailing, 0, width - resp_len)))
    return torch.stack(rows, dim=0)


def build_attention_mask_from_nested(input_ids: torch.Tensor, max_seq_len: int | None = None) -> torch.Tensor:
    """A right-padded int32 attention mask ``[bs, max_seq_len]`` (default: the longest row) for nested ``input_ids``:
    1 on the first ``len_i`` columns of row ``i``."""
    if not input_ids.is_nested:
        raise ValueError("build_attention_mask_from_nested needs a nested input_ids tensor")
    device = input_ids.values().device
    lengths = input_ids.offsets().diff().to(device)
    width = int(lengths.max().item()) if max_seq_len is None else max_seq_len
    return (torch.arange(width, device=device).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int32)


def embeds_padding_2_no_padding(data: TensorDict) -> TensorDict:
    """Pack ``prompt_embeds`` ``[bs, seq_len, dim]`` by ``prompt_embeds_mask`` ``[bs, seq_len]`` (and the
    ``negative_prompt_embeds`` pair when it is a tensor), in place: both become jagged nested tensors of the masked
    positions (the mask of all-True values). Returns ``data``."""

    def pack(embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = [mask[i].bool() for i in range(mask.shape[0])]
        return _jagged([embeds[i, k] for i, k in enumerate(keep)]), _jagged([k[k] for k in keep])

    data["prompt_embeds"], data["prompt_embeds_mask"] = pack(data["prompt_embeds"], data["prompt_embeds_mask"])
    if isinstance(data.get("negative_prompt_embeds", None), torch.Tensor):
        data["negative_prompt_embeds"], data["negative_prompt_embeds_mask"] = pack(
            data["negative_prompt_embeds"], data["negative_prompt_embeds_mask"]
        )
    return data


def response_from_nested(tensor: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The response part of a nested output over whole sequences ``[bs, j, *]``: a nested ``[bs, r_i, *]`` with
    ``r_i`` from the nested ``response_mask``, shifted left by one (the outputs that predict the response)."""
    values, offsets = tensor.values(), tensor.offsets()
    lengths = response_mask.offsets().diff().tolist()
    return _jagged([values[end - r - 1 : end - 1] for r, end in zip(lengths, offsets[1:].tolist(), strict=True)])


def response_to_nested(tensor: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A right-padded ``[bs, response_len, *]`` tensor as a nested one, row ``i`` cut to the length of the nested
    ``response_mask``'s row ``i``."""
    if not response_mask.is_nested:
        raise ValueError("response_to_nested needs a nested response_mask")
    lengths = response_mask.offsets().diff().tolist()
    return _jagged([tensor[i, :r] for i, r in enumerate(lengths)])
