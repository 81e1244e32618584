"""Rows for the offline trainers (SFT, DPO, KTO) and the SFT dataset: prompt/response rows -> token ids + loss mask.

Sources accepted everywhere (:func:`load_rows`): a ``datasets.Dataset``, a pandas DataFrame, a list of dicts, or one
path / a list of paths to ``.parquet``, ``.jsonl`` or ``.json`` files (``bundled://`` names and ``~`` work). Every
row keeps where it came from, so a bad row is reported as ``<file> row <i>`` (or ``row <i>`` for in-memory data).

Token layout of one example (the offline trainers all share it): ``prompt_ids + response_ids`` with a loss mask that
is 1 exactly on the response tokens. A string prompt is tokenized as plain text (with the tokenizer's own special
tokens, e.g. BOS); a prompt given as chat messages goes through the tokenizer's chat template with the generation
prompt. A string response gets the EOS token appended; a response given as messages is rendered by the template.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verl.data.bundled import resolve_data_path

TRUNCATION_MODES = ("error", "right", "left")


@dataclass
class Rows:
    """Rows read from a source, with the origin of each one for error messages."""

    rows: list[dict[str, Any]]
    files: list[str | None]  # per row: the file it came from (None for in-memory data)
    file_rows: list[int]  # per row: its index inside that file (or inside the in-memory data)

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, i: int) -> str:
        """``'<file> row <j>'`` or ``'row <j>'``: where row ``i`` came from."""
        f = self.files[i]
        return f"{f} row {self.file_rows[i]}" if f else f"row {self.file_rows[i]}"


def to_plain(value: Any) -> Any:
    """numpy arrays/scalars (as parquet and pandas return them) -> plain Python lists/scalars, recursively."""
    if isinstance(value, np.ndarray):
        return [to_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def _read_file(path: str) -> list[dict[str, Any]]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file {path} does not exist")
    lower = path.lower()
    if lower.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            return [to_plain(r) for r in pq.read_table(path).to_pylist()]
        except Exception as e:
            raise ValueError(f"cannot read parquet file {path}: {type(e).__name__}: {e}") from e
    if lower.endswith(".jsonl"):
        rows = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} line {lineno}: invalid JSON: {e}") from e
        return rows
    if lower.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: invalid JSON: {e}") from e
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of row objects, got {type(data).__name__}")
        return data
    raise ValueError(f"data file {path}: unsupported format; expected .parquet, .jsonl or .json")


def load_rows(source: Any) -> Rows:
    """Read rows from a ``datasets.Dataset``, DataFrame, list of dicts, or file path(s) (see the module docstring).

    Raises:
        ValueError: naming the file and row, for a source that is empty or holds a row that is not a mapping.
    """
    if source is None:
        raise ValueError("no dataset given (expected a datasets.Dataset, a parquet/jsonl path or a list of dicts)")
    chunks: list[tuple[str | None, list[Any]]] = []
    if isinstance(source, (str, os.PathLike)):
        source = [source]
    if hasattr(source, "to_dict") and hasattr(source, "columns") and not hasattr(source, "features"):  # pandas
        chunks.append((None, source.to_dict(orient="records")))
    elif hasattr(source, "features") and hasattr(source, "column_names"):  # datasets.Dataset
        chunks.append((None, list(source)))
    elif isinstance(source, Sequence) and source and all(isinstance(s, (str, os.PathLike)) for s in source):
        for p in source:
            path = resolve_data_path(str(p))
            chunks.append((path, _read_file(path)))
    elif isinstance(source, Sequence):
        chunks.append((None, list(source)))
    else:
        raise ValueError(
            f"unsupported dataset type {type(source).__name__}; expected a datasets.Dataset, a DataFrame, a list of "
            "dicts, or parquet/jsonl/json path(s)"
        )
    out = Rows([], [], [])
    for path, rows in chunks:
        for j, row in enumerate(rows):
            if not isinstance(row, Mapping):
                where = f"{path} row {j}" if path else f"row {j}"
                raise ValueError(f"{where}: expected a mapping of field -> value, got {type(row).__name__}")
            out.rows.append(to_plain(dict(row)))
            out.files.append(path)
            out.file_rows.append(j)
    if not out.rows:
        raise ValueError(f"dataset {source!r:.200} has no rows")
    return out


def require_field(rows: Rows, i: int, key: str) -> Any:
    """The value of ``key`` in row ``i``; a missing or null field raises a ValueError naming field, row and file."""
    row = rows.rows[i]
    if key not in row or row[key] is None:
        present = sorted(row)
        raise ValueError(f"{rows.where(i)}: missing field {key!r} (fields present: {present})")
    return row[key]


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in value)


def check_text_or_messages(value: Any, key: str, where: str) -> None:
    if isinstance(value, str) or (_is_messages(value) and value):
        return
    raise ValueError(
        f"{where}: field {key!r} must be a string or a non-empty list of chat messages {{'role', 'content'}}, "
        f"got {type(value).__name__}: {value!r:.200}"
    )


def _template(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool, where: str) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{where}: the row holds chat messages but the tokenizer has no chat template")
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def _encode(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])


def encode_prompt(tokenizer: Any, prompt: str | list[dict[str, Any]], where: str = "row") -> list[int]:
    """Token ids of a prompt: plain text (with the tokenizer's special tokens), or messages through the chat
    template with the generation prompt appended."""
    if isinstance(prompt, str):
        return _encode(tokenizer, prompt, add_special_tokens=True)
    return _encode(tokenizer, _template(tokenizer, prompt, True, where), add_special_tokens=False)


def encode_response(
    tokenizer: Any, prompt: str | list[dict[str, Any]], response: str | list[dict[str, Any]], where: str = "row"
) -> list[int]:
    """Token ids of a response that follows ``prompt``.

    A string gets the EOS token appended. Messages (e.g. ``[{"role": "assistant", "content": ...}]``) are rendered
    as the template's continuation of the prompt: ``template(prompt + response)`` minus ``template(prompt, gen)``.
    """
    if isinstance(response, str):
        ids = _encode(tokenizer, response, add_special_tokens=False)
        if tokenizer.eos_token_id is not None:
            ids.append(int(tokenizer.eos_token_id))
        return ids
    prompt_msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    head = _template(tokenizer, prompt_msgs, True, where)
    full = _template(tokenizer, prompt_msgs + list(response), False, where)
    if not full.startswith(head):
        raise ValueError(f"{where}: the chat template does not render the prompt as a prefix of prompt + response")
    return _encode(tokenizer, full[len(head) :], add_special_tokens=False)


def fit_to_length(
    prompt_ids: list[int],
    response_ids: list[int],
    max_length: int,
    max_prompt_length: int | None,
    truncation: str,
    where: str,
) -> tuple[list[int], list[int]]:
    """Apply the length limits to one example.

    ``truncation="right"``: a prompt longer than ``max_prompt_length`` keeps its last tokens (those next to the
    response); then the response is cut from the right so that the total fits ``max_length``. ``"left"`` (verl's
    SFT option): the sequence keeps its last ``max_length`` tokens - the start of the prompt goes first, then the
    start of the response. ``"error"`` raises instead of cutting. With ``right``, a prompt that leaves no room for a
    single response token raises; any mode raises when no response token is left.
    """
    if truncation not in TRUNCATION_MODES:
        raise ValueError(f"data.truncation must be one of {list(TRUNCATION_MODES)}, got {truncation!r}")
    if max_prompt_length is not None and len(prompt_ids) > max_prompt_length:
        if truncation == "error":
            raise ValueError(
                f"{where}: prompt has {len(prompt_ids)} tokens > max_prompt_length={max_prompt_length} "
                "(set data.truncation=right to cut it)"
            )
        prompt_ids = prompt_ids[len(prompt_ids) - max_prompt_length :]
    if truncation == "left" and len(prompt_ids) + len(response_ids) > max_length:
        excess = len(prompt_ids) + len(response_ids) - max_length
        cut = min(excess, len(prompt_ids))
        prompt_ids, response_ids = prompt_ids[cut:], response_ids[excess - cut :]
    if len(prompt_ids) + len(response_ids) > max_length:
        room = max_length - len(prompt_ids)
        if truncation == "error" or room < 1:
            raise ValueError(
                f"{where}: prompt ({len(prompt_ids)} tokens) + response ({len(response_ids)} tokens) exceeds "
                f"max_length={max_length}"
                + ("; set data.truncation=right to cut the response" if room >= 1 else "; set max_prompt_length")
            )
        response_ids = response_ids[:room]
    if not response_ids:
        raise ValueError(f"{where}: the response is empty (no tokens to train on)")
    return prompt_ids, response_ids


def join_example(prompt_ids: list[int], response_ids: list[int]) -> dict[str, list[int]]:
    """``{"input_ids": prompt + response, "loss_mask": 0 on the prompt, 1 on the response}``."""
    return {"input_ids": prompt_ids + response_ids, "loss_mask": [0] * len(prompt_ids) + [1] * len(response_ids)}


def encode_conversation(tokenizer: Any, messages: list[dict[str, Any]], where: str) -> dict[str, list[int]]:
    """Multi-turn SFT: the whole conversation through the chat template; the loss mask covers every assistant
    message's rendered content (including its end-of-turn text), not the role headers or other turns."""
    ids: list[int] = []
    mask: list[int] = []
    rendered = ""
    for k, msg in enumerate(messages):
        if msg.get("role") == "assistant":
            head = _template(tokenizer, messages[:k], True, where) if k else _template(tokenizer, [], True, where)
            pieces = [(head, 0), (_template(tokenizer, messages[: k + 1], False, where), 1)]
        else:
            pieces = [(_template(tokenizer, messages[: k + 1], False, where), 0)]
        for text, label in pieces:
            if not text.startswith(rendered):
                raise ValueError(f"{where}: the chat template does not render conversation prefixes as prefixes")
            seg = _encode(tokenizer, text[len(rendered) :], add_special_tokens=False)
            ids += seg
            mask += [label] * len(seg)
            rendered = text
    if not any(mask):
        raise ValueError(f"{where}: the conversation has no assistant message to train on")
    return {"input_ids": ids, "loss_mask": mask}


def split_image_conversation(
    messages: list[dict[str, Any]], where: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(prompt messages, [assistant reply])`` of a conversation with images whose one assistant message is the
    last (upstream's vision-language SFT data, e.g. image captions); other shapes raise, naming the row."""
    roles = [m.get("role") for m in messages]
    if roles.count("assistant") != 1 or roles[-1] != "assistant":
        raise ValueError(
            f"{where}: a conversation with images is trained here when its only assistant message is the last "
            f"(roles: {roles}); split it into one row per assistant reply"
        )
    return list(messages[:-1]), [messages[-1]]


def pad_batch(seqs: list[list[int]], masks: list[list[int]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad sequences into ``input_ids``, ``attention_mask``, ``position_ids`` and ``loss_mask``, all
    ``[batch, max_len]``; ``loss_mask[b, t] = 1`` when token ``t`` of sequence ``b`` is a response token."""
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), int(pad_token_id), dtype=torch.long)
    attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
    loss_mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, (s, m) in enumerate(zip(seqs, masks)):
        input_ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        attention_mask[b, : len(s)] = 1
        loss_mask[b, : len(m)] = torch.tensor(m, dtype=torch.long)
    position_ids = torch.clamp(torch.cumsum(attention_mask, dim=-1) - 1, min=0)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "loss_mask": loss_mask,
    }


class TokenizedRowsDataset(torch.utils.data.Dataset):
    """Rows read by :func:`load_rows`, tokenized once into ``self.items`` (one dict per row) by the subclass.

    Holds the tokenizer and the id to pad with (the pad token, else EOS; a tokenizer with neither is refused).
    """

    def __init__(self, source: Any, tokenizer: Any) -> None:
        self.rows = load_rows(source)
        self.tokenizer = tokenizer
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.pad_token_id is None:
            raise ValueError("the tokenizer has neither a pad token nor an EOS token to pad with")
        self.items: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


def _dig(value: Any, key: str, dict_keys: Sequence[str] | None, where: str) -> Any:
    """``value[k1][k2]...`` for ``dict_keys = [k1, k2, ...]``; errors name the field and the missing key."""
    path = key
    for k in dict_keys or ():
        if not isinstance(value, Mapping) or k not in value:
            got = sorted(value) if isinstance(value, Mapping) else type(value).__name__
            raise ValueError(f"{where}: field {path!r} has no key {k!r} (data.*_dict_keys); it holds {got}")
        value = value[k]
        path = f"{path}.{k}"
    return value


class SFTDataset(TokenizedRowsDataset):
    """Supervised fine-tuning examples: ``{prompt, response}`` rows, or ``{messages}`` conversations.

    Args:
        source: anything :func:`load_rows` reads.
        tokenizer: a Hugging Face tokenizer (a pad token or an EOS token is needed to pad).
        max_length: cap on prompt + response tokens. ``max_prompt_length``: optional cap on the prompt.
        truncation: ``right`` (cut as in :func:`fit_to_length`) or ``error``.
        prompt_key / response_key / messages_key: field names. A row with ``messages_key`` (and no
            ``prompt_key``) is a conversation trained on all its assistant turns (with images: one assistant
            turn, the last, see :func:`split_image_conversation`).
        prompt_dict_keys / response_dict_keys: when the prompt / response field holds a dict (e.g. verl's
            ``extra_info``), the path of keys to the text inside it (``["question"]`` reads
            ``row[prompt_key]["question"]``).
        apply_chat_template: a plain-text prompt becomes a user message rendered by the chat template with the
            generation prompt (verl's SFT does this); False tokenizes it as it is.
        processor / image_key: a vision-language model's processor and the field of a row's images, which the
            ``<image>`` placeholders of its prompt refer to (``{prompt, response}`` rows; see
            docs/vision_language.md). The prompt with its images is never truncated.

    Items are ``{"input_ids": list[int], "loss_mask": list[int]}`` (plus ``multi_modal_inputs`` for a row with
    images); :meth:`collate` pads a list of them.
    """

    def __init__(
        self,
        source: Any,
        tokenizer: Any,
        max_length: int = 1024,
        max_prompt_length: int | None = None,
        truncation: str = "right",
        prompt_key: str = "prompt",
        response_key: str = "response",
        messages_key: str = "messages",
        prompt_dict_keys: Sequence[str] | None = None,
        response_dict_keys: Sequence[str] | None = None,
        apply_chat_template: bool = False,
        processor: Any = None,
        image_key: str = "images",
    ) -> None:
        super().__init__(source, tokenizer)
        for i, row in enumerate(self.rows.rows):
            where = self.rows.where(i)
            images = row.get(image_key)
            if images and processor is None:
                raise ValueError(f"{where}: the row has images ({image_key!r}) but the model has no processor")
            conversation = messages_key in row and prompt_key not in row
            if conversation:
                messages = row[messages_key]
                if not (_is_messages(messages) and messages):
                    raise ValueError(f"{where}: field {messages_key!r} must be a non-empty list of chat messages")
            if conversation and not images:
                item = encode_conversation(tokenizer, messages, where)
                if len(item["input_ids"]) > max_length:
                    if truncation == "error":
                        raise ValueError(f"{where}: {len(item['input_ids'])} tokens exceed max_length={max_length}")
                    # left: keep the last max_length tokens (the latest turns); right: the first
                    item = {k: v[-max_length:] if truncation == "left" else v[:max_length] for k, v in item.items()}
                    if not any(item["loss_mask"]):
                        raise ValueError(f"{where}: no assistant token is left within max_length={max_length}")
            else:
                if conversation:  # with images: the processor renders the turns before the one assistant reply
                    prompt, response = split_image_conversation(messages, where)
                else:
                    prompt = _dig(require_field(self.rows, i, prompt_key), prompt_key, prompt_dict_keys, where)
                    response = _dig(require_field(self.rows, i, response_key), response_key, response_dict_keys, where)
                if apply_chat_template and isinstance(prompt, str):
                    prompt = [{"role": "user", "content": prompt}]
                check_text_or_messages(prompt, prompt_key, where)
                check_text_or_messages(response, response_key, where)
                mm_inputs = None
                if images:
                    from verl.data.multi_modal_inputs import processor_inputs

                    if isinstance(prompt, str):
                        prompt = [{"role": "user", "content": prompt}]
                    p, mm_inputs, _, _ = processor_inputs(processor, prompt, list(images), where)
                else:
                    p = encode_prompt(tokenizer, prompt, where)
                r = encode_response(tokenizer, prompt, response, where)
                p_fit, r_fit = fit_to_length(p, r, max_length, max_prompt_length, truncation, where)
                if mm_inputs is not None and p_fit != p:
                    raise ValueError(f"{where}: the prompt with images ({len(p)} tokens) does not fit max_length")
                item = join_example(p_fit, r_fit)
                if mm_inputs is not None:
                    item["multi_modal_inputs"] = mm_inputs
            self.items.append(item)

    def collate(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad items into ``[batch, max_len]`` tensors (see :func:`pad_batch`); a batch with images also gets
        ``multi_modal_inputs``, one dict (or None) per row."""
        batch: dict[str, Any] = pad_batch(
            [it["input_ids"] for it in items], [it["loss_mask"] for it in items], self.pad_token_id
        )
        if any("multi_modal_inputs" in it for it in items):
            batch["multi_modal_inputs"] = [it.get("multi_modal_inputs") for it in items]
        return batch
