"""Preference data for DPO (paired ``{prompt, chosen, rejected}``) and KTO (unpaired ``{prompt, completion, label}``).

Rows are read by :func:`verl.data.sft_dataset.load_rows` (``datasets.Dataset``, parquet/jsonl paths, lists
of dicts) and tokenized with the shared prompt/response layout of that module. Optional precomputed reference
log-probs are carried along: ``ref_chosen_logps`` / ``ref_rejected_logps`` for DPO, ``ref_logps`` /
``ref_kl_logps`` for KTO. A missing field raises a ValueError naming the field, the row and the file.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from verl.data.sft_dataset import (
    TokenizedRowsDataset,
    check_text_or_messages,
    encode_prompt,
    encode_response,
    fit_to_length,
    join_example,
    pad_batch,
    require_field,
)

DPO_REF_KEYS = ("ref_chosen_logps", "ref_rejected_logps")
KTO_REF_KEYS = ("ref_logps", "ref_kl_logps")


def _ref_value(row: dict[str, Any], key: str, where: str) -> float | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"{where}: field {key!r} must be a finite number (a sequence log-prob), got {value!r}")
    return float(value)


def _collect_refs(items: list[dict[str, Any]], keys: tuple[str, ...], where: list[str]) -> bool:
    """True when every item has every key of ``keys``; a partial set of columns is an error."""
    have = [all(it.get(k) is not None for k in keys) for it in items]
    if all(have):
        return True
    if any(have):
        i = have.index(False)
        raise ValueError(f"{where[i]}: reference log-prob columns {list(keys)} are set on some rows but not this one")
    return False


def _add_ref_columns(out: dict[str, torch.Tensor], items: list[dict[str, Any]], keys: tuple[str, ...]) -> None:
    """Add each reference column of ``keys`` to the collated ``out`` as float32 ``[batch]``, when every item has all."""
    if all(it.get(k) is not None for it in items for k in keys):
        for k in keys:
            out[k] = torch.tensor([it[k] for it in items], dtype=torch.float32)


class PreferenceDataset(TokenizedRowsDataset):
    """Paired preferences for DPO: each row gives a prompt and a chosen and a rejected response.

    Prompts and responses may be strings or chat messages (see ``sft_dataset``). Items hold
    ``chosen_input_ids`` / ``chosen_loss_mask`` / ``rejected_input_ids`` / ``rejected_loss_mask`` and, when the
    rows carry them, ``ref_chosen_logps`` / ``ref_rejected_logps`` (then :attr:`has_reference` is True).
    """

    def __init__(
        self,
        source: Any,
        tokenizer: Any,
        max_length: int = 1024,
        max_prompt_length: int | None = None,
        truncation: str = "right",
        prompt_key: str = "prompt",
        chosen_key: str = "chosen",
        rejected_key: str = "rejected",
    ) -> None:
        super().__init__(source, tokenizer)
        wheres = [self.rows.where(i) for i in range(len(self.rows))]
        for i, row in enumerate(self.rows.rows):
            where = wheres[i]
            prompt = require_field(self.rows, i, prompt_key)
            chosen = require_field(self.rows, i, chosen_key)
            rejected = require_field(self.rows, i, rejected_key)
            for key, value in ((prompt_key, prompt), (chosen_key, chosen), (rejected_key, rejected)):
                check_text_or_messages(value, key, where)
            p = encode_prompt(tokenizer, prompt, where)
            item: dict[str, Any] = {}
            for name, resp in (("chosen", chosen), ("rejected", rejected)):
                r = encode_response(tokenizer, prompt, resp, where)
                ex = join_example(*fit_to_length(p, r, max_length, max_prompt_length, truncation, f"{where} {name}"))
                item[f"{name}_input_ids"] = ex["input_ids"]
                item[f"{name}_loss_mask"] = ex["loss_mask"]
            for key in DPO_REF_KEYS:
                item[key] = _ref_value(row, key, where)
            self.items.append(item)
        self.has_reference = _collect_refs(self.items, DPO_REF_KEYS, wheres)

    def collate(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Chosen sequences then rejected ones, padded together: ``input_ids`` etc. are ``[2 * batch, max_len]``
        (rows ``0..B-1`` chosen, ``B..2B-1`` rejected); ``ref_*_logps`` are ``[batch]`` when present."""
        seqs = [it["chosen_input_ids"] for it in items] + [it["rejected_input_ids"] for it in items]
        masks = [it["chosen_loss_mask"] for it in items] + [it["rejected_loss_mask"] for it in items]
        out = pad_batch(seqs, masks, self.pad_token_id)
        _add_ref_columns(out, items, DPO_REF_KEYS)
        return out


class KTODataset(TokenizedRowsDataset):
    """Unpaired binary feedback for KTO (Ethayarajh et al., 2024): ``{prompt, completion, label}``.

    ``label`` is True for a desirable completion and False for an undesirable one. For the KL reference point each
    row is also paired with a *mismatched* completion, the one of the next row (``(i + 1) mod N``), as in the
    paper's estimate of ``z0`` from unrelated prompt/completion pairs; the pairing is fixed per row so that
    precomputed reference log-probs (``ref_logps``, ``ref_kl_logps``) stay valid whatever the batching.
    """

    def __init__(
        self,
        source: Any,
        tokenizer: Any,
        max_length: int = 1024,
        max_prompt_length: int | None = None,
        truncation: str = "right",
        prompt_key: str = "prompt",
        completion_key: str = "completion",
        label_key: str = "label",
    ) -> None:
        super().__init__(source, tokenizer)
        wheres = [self.rows.where(i) for i in range(len(self.rows))]
        prompts: list[list[int]] = []
        completions: list[list[int]] = []
        raw_prompts: list[Any] = []
        raw_completions: list[Any] = []
        for i, row in enumerate(self.rows.rows):
            where = wheres[i]
            prompt = require_field(self.rows, i, prompt_key)
            completion = require_field(self.rows, i, completion_key)
            label = require_field(self.rows, i, label_key)
            check_text_or_messages(prompt, prompt_key, where)
            check_text_or_messages(completion, completion_key, where)
            if not isinstance(label, bool) and label not in (0, 1):
                raise ValueError(f"{where}: field {label_key!r} must be a bool (True = desirable), got {label!r}")
            p = encode_prompt(tokenizer, prompt, where)
            r = encode_response(tokenizer, prompt, completion, where)
            p, r = fit_to_length(p, r, max_length, max_prompt_length, truncation, where)
            prompts.append(p)
            completions.append(r)
            raw_prompts.append(prompt)
            raw_completions.append(completion)
            ex = join_example(p, r)
            self.items.append(
                {
                    "input_ids": ex["input_ids"],
                    "loss_mask": ex["loss_mask"],
                    "label": bool(label),
                    **{key: _ref_value(row, key, where) for key in KTO_REF_KEYS},
                }
            )
        n = len(self.items)
        for i, item in enumerate(self.items):
            j = (i + 1) % n
            # The mismatched completion is re-tokenized after this row's prompt: chat-message completions render
            # differently after a different prompt, and the length limits apply to the new pair.
            r = completions[j] if isinstance(raw_completions[j], str) else None
            if r is None:
                r = encode_response(tokenizer, raw_prompts[i], raw_completions[j], wheres[j])
            room = max(1, max_length - len(prompts[i]))
            kl = join_example(prompts[i], r[:room])
            item["kl_input_ids"] = kl["input_ids"]
            item["kl_loss_mask"] = kl["loss_mask"]
        self.has_reference = _collect_refs(self.items, KTO_REF_KEYS, wheres)
        labels = [it["label"] for it in self.items]
        self.num_desirable = sum(labels)
        self.num_undesirable = n - self.num_desirable

    def collate(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Matched sequences then their mismatched KL pairs: ``input_ids`` etc. ``[2 * batch, max_len]`` (rows
        ``0..B-1`` matched, ``B..2B-1`` KL pairs); ``label`` ``[batch]`` bool; ``ref_logps`` / ``ref_kl_logps``
        ``[batch]`` when present."""
        seqs = [it["input_ids"] for it in items] + [it["kl_input_ids"] for it in items]
        masks = [it["loss_mask"] for it in items] + [it["kl_loss_mask"] for it in items]
        out = pad_batch(seqs, masks, self.pad_token_id)
        out["label"] = torch.tensor([it["label"] for it in items], dtype=torch.bool)
        _add_ref_columns(out, items, KTO_REF_KEYS)
        return out
