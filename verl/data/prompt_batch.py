"""Prompt batches: what a user hands in as prompts (a string, strings, chat message lists, token ids, a
``DataProvider`` batch) as the left-padded prompt ``DataProto`` that the rollout engines generate from.

One encoder for every caller: the Python API (:mod:`verl.api.ppo`, re-exported as ``verl.api.data.encode_prompts``),
the agent API's prompt rows and the in-process LLM judge (:class:`verl.workers.judge_worker.HFJudgeBackend`). It
sits on the data floor, under the workers and the API that use it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto

__all__ = ["encode_prompts", "prompt_items"]


def prompt_items(prompts: Any, prompt_key: str) -> tuple[list[Any], dict[str, list[Any]]]:
    """Normalise the accepted prompt forms into a list (strings, chat message lists or id lists) + extra columns."""
    if isinstance(prompts, str):
        return [prompts], {}
    if isinstance(prompts, dict):
        if prompt_key not in prompts:
            raise KeyError(f"prompt batch has no column {prompt_key!r} (data.prompt_key); columns: {sorted(prompts)}")
        items = list(prompts[prompt_key])
        extra = {k: list(v) for k, v in prompts.items() if k != prompt_key}
        for k, v in extra.items():
            if len(v) != len(items):
                raise ValueError(f"prompt batch column {k!r} has {len(v)} values for {len(items)} prompts")
        return items, extra
    if isinstance(prompts, (list, tuple)):
        return list(prompts), {}
    raise TypeError(
        f"cannot build prompts from {type(prompts).__name__}; pass token ids, a string, a list of strings or chat "
        "message lists, a DataProvider batch (dict) or a DataProto"
    )


def encode_prompts(
    prompts: Any,
    tokenizer: Any,
    attention_mask: Any = None,
    prompt_key: str = "prompt",
    max_prompt_length: int = 1024,
    truncation: str = "error",
    apply_chat_template: bool = True,
) -> Any:
    """Build the prompt DataProto of one step: left-padded ``input_ids``, ``attention_mask`` and
    ``position_ids`` ``[batch, prompt_len]`` (``position_ids = cumsum(mask) - 1``, 0 on padding).

    ``prompts`` may be a DataProto (returned unchanged), token ids (a ``[batch, len]`` / ``[len]`` tensor, whose
    leading pad tokens count as left padding unless ``attention_mask`` is given, or a list of id lists), a string,
    a list of strings or of chat message lists (the chat template is applied when ``apply_chat_template`` and the
    tokenizer has one), or a DataProvider batch ``{column: values}`` whose other columns become non-tensor columns.
    ``data_source`` (default ``"api"``) and ``reward_model`` (``{"ground_truth": ...}`` from a ``ground_truth``
    column) are always present, as verl's reward managers need them. Prompts longer than ``max_prompt_length``
    follow ``truncation``: ``error`` (names the row), ``left`` or ``right``.
    """
    if isinstance(prompts, DataProto):
        return prompts
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if isinstance(prompts, torch.Tensor):
        rows, extra = _rows_of_tensor(prompts, attention_mask, pad_id), {}
    else:
        items, extra = prompt_items(prompts, prompt_key)
        rows = [_row_ids(i, item, tokenizer, apply_chat_template) for i, item in enumerate(items)]
    if not rows:
        raise ValueError("no prompts given")
    rows = [_fit_length(i, row, max_prompt_length, truncation) for i, row in enumerate(rows)]
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row) :] = 1
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": mask, "position_ids": position_ids},
        non_tensors=_non_tensor_columns(extra, len(rows)),
    )


def _rows_of_tensor(ids: Any, attention_mask: Any, pad_id: int) -> list[list[int]]:
    """The valid ids of each row of ``ids [batch, len]`` (or ``[len]``): after its left padding, or where
    ``attention_mask`` is 1 when given."""
    ids = ids.detach().to("cpu").long()
    ids = ids.unsqueeze(0) if ids.dim() == 1 else ids
    if ids.dim() != 2:
        raise ValueError(f"prompt input_ids must be [batch, len] or [len], got shape {tuple(ids.shape)}")
    if attention_mask is None:
        # leading pad tokens are left padding; everything from the first real token on is prompt
        mask = (ids != pad_id).long().cummax(dim=-1).values
    else:
        mask = attention_mask.detach().to("cpu").long().reshape(ids.shape)
    return [row[m.bool()].tolist() for row, m in zip(ids, mask)]


def _row_ids(i: int, item: Any, tokenizer: Any, apply_chat_template: bool) -> list[int]:
    """Token ids of prompt row ``i``: a string (through the chat template when the tokenizer has one and
    ``apply_chat_template``), chat messages, or token ids."""
    if isinstance(item, str):
        if apply_chat_template and getattr(tokenizer, "chat_template", None):
            return _chat_ids(tokenizer, [{"role": "user", "content": item}])
        return tokenizer.encode(item, add_special_tokens=False)
    if isinstance(item, (list, tuple)) and item and isinstance(item[0], dict):
        return _chat_ids(tokenizer, list(item))
    if isinstance(item, (list, tuple)) or (hasattr(item, "tolist") and not isinstance(item, dict)):
        return [int(t) for t in (item.tolist() if hasattr(item, "tolist") else item)]
    raise TypeError(f"prompt row {i}: expected a string, chat messages or token ids, got {type(item)}")


def _fit_length(i: int, row: list[int], max_prompt_length: int, truncation: str) -> list[int]:
    """Row ``i`` within ``max_prompt_length`` tokens: cut on the ``left`` / ``right``, or ValueError (``error``)."""
    if not row:
        raise ValueError(f"prompt row {i} is empty after tokenization")
    if len(row) <= max_prompt_length:
        return row
    if truncation == "left":
        return row[-max_prompt_length:]
    if truncation == "right":
        return row[:max_prompt_length]
    raise ValueError(
        f"prompt row {i} has {len(row)} tokens > data.max_prompt_length={max_prompt_length} "
        "(set data.truncation=left|right to cut it, or raise max_prompt_length)"
    )


def _non_tensor_columns(extra: dict[str, list[Any]], n: int) -> dict[str, Any]:
    """The batch's other columns as object arrays, with ``data_source`` (default ``"api"``) and ``reward_model``
    (``{"style": "rule", "ground_truth": ...}`` from a ``ground_truth`` column) always present."""

    def column(values: list[Any]) -> Any:
        arr = np.empty(n, dtype=object)
        arr[:] = values
        return arr

    columns = {key: column(values) for key, values in extra.items()}
    columns.setdefault("data_source", column(["api"] * n))
    if "reward_model" not in columns:
        truths = extra.get("ground_truth", [None] * n)
        columns["reward_model"] = column([{"style": "rule", "ground_truth": t} for t in truths])
    return columns


def _chat_ids(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer transformers
        ids = ids["input_ids"]
    return [int(t) for t in ids]
