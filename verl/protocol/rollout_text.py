"""The text of a rollout row that a reward sees: one definition for the reward managers, the Python API's text
rewards, the reward-model worker, the judge requests of the agent loops and the logged generations.

A rollout batch holds ``prompts [bs, prompt_len]`` (left-padded), ``responses [bs, response_len]`` (right-padded)
and ``attention_mask [bs, prompt_len + response_len]``. A row's text is

* **prompt**: the prompt tokens where ``attention_mask`` is 1;
* **response**: the first ``valid_response_length`` response tokens, where ``valid_response_length`` is the sum of
  the response part of ``attention_mask``. In a multi-turn rollout that is the whole conversation after the
  prompt, its tool and user turns included (their ``response_mask`` is 0: they are not trained on, but they are
  part of what is scored); in a single-turn rollout it is the same tokens as ``response_mask``;

both decoded with ``skip_special_tokens=True``. This is what upstream verl's ``NaiveRewardManager`` decodes
(``verl/workers/reward_manager/naive.py``: ``attention_mask[prompt_length:].sum()`` response tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["decode_prompt_response", "response_texts", "rollout_row_ids", "rollout_texts", "valid_response_lengths"]


def _tensors(data: Any) -> Mapping[str, torch.Tensor]:
    """The tensor batch of a ``DataProto`` (its ``.batch``) or a mapping of tensors as is."""
    return data.batch if hasattr(data, "batch") else data


def valid_response_lengths(data: Any) -> torch.Tensor:
    """``[bs]`` long: the valid response length of each row of ``data`` (a ``DataProto`` or a mapping with
    ``responses [bs, response_len]`` and ``attention_mask [bs, prompt_len + response_len]``): the sum of the
    response part of ``attention_mask``. A row's score sits at ``length - 1`` (position 0 for an empty response)."""
    batch = _tensors(data)
    width = batch["responses"].shape[-1]
    return batch["attention_mask"][:, -width:].sum(-1).long()


def rollout_row_ids(data: Any) -> list[tuple[list[int], list[int]]]:
    """``(valid prompt token ids, valid response token ids)`` of every row of ``data`` (see the module docstring;
    ``prompts``, ``responses`` and ``attention_mask`` are read)."""
    batch = _tensors(data)
    prompts, responses = batch["prompts"].cpu(), batch["responses"].cpu()
    attention_mask = batch["attention_mask"].cpu()
    prompt_mask = attention_mask[:, : prompts.shape[-1]].bool()
    lengths = valid_response_lengths({"responses": responses, "attention_mask": attention_mask}).tolist()
    return [
        (prompts[i][prompt_mask[i]].tolist(), responses[i][: int(lengths[i])].tolist()) for i in range(len(prompts))
    ]


def decode_prompt_response(tokenizer: Any, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> tuple[str, str]:
    """The prompt and response strings a reward sees, from a row's valid prompt and response token ids
    (:func:`rollout_row_ids`), decoded without special tokens."""
    return (
        tokenizer.decode(list(prompt_ids), skip_special_tokens=True),
        tokenizer.decode(list(response_ids), skip_special_tokens=True),
    )


def response_texts(tokenizer: Any, data: Any) -> list[str]:
    """The response texts of every row of ``data`` as a reward sees them (reads ``responses`` and
    ``attention_mask`` only: a generate output without a ``prompts`` column works too)."""
    batch = _tensors(data)
    responses = batch["responses"].cpu()
    lengths = valid_response_lengths({"responses": responses, "attention_mask": batch["attention_mask"].cpu()})
    return [tokenizer.decode(r[: int(n)].tolist(), skip_special_tokens=True) for r, n in zip(responses, lengths)]


def rollout_texts(tokenizer: Any, data: Any) -> tuple[list[str], list[str]]:
    """``(prompt texts, response texts)`` of every row of a rollout batch, as a reward sees them (module
    docstring)."""
    pairs = [decode_prompt_response(tokenizer, p, r) for p, r in rollout_row_ids(data)]
    return [p for p, _ in pairs], [r for _, r in pairs]
