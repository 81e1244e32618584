"""``DataProvider``: stream prompt batches from parquet / JSONL files with background prefetch.

``data_path`` is a file, a directory (every ``*.parquet`` / ``*.jsonl`` file in it, sorted), a glob pattern or any
fsspec URL of those (``file://``, ``memory://``, ``s3://`` when ``s3fs`` is installed). Files are read by
``num_workers`` threads (file order is kept) and assembled into batches by a background thread that stays at most
``prefetch_factor`` batches ahead, so reading overlaps with training while memory stays bounded.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from verl.utils.seeding import epoch_seed

FORMATS = {"parquet": (".parquet", ".pq"), "jsonl": (".jsonl", ".json")}
_END = object()


class DataProviderError(RuntimeError):
    """A data file could not be listed or read; the message names the file (and the line for JSONL)."""


def _infer_format(path: str) -> str | None:
    lower = path.lower()
    for fmt, suffixes in FORMATS.items():
        if lower.endswith(suffixes):
            return fmt
    return None


class DataProvider:
    """Iterate over batches (``dict`` column -> list of values, ``batch_size`` rows) of tabular prompt data.

    Args:
        data_path: file, directory, glob or fsspec URL (see the module docstring).
        file_format: ``"parquet"`` or ``"jsonl"``; None infers it from the file suffixes.
        prefetch_factor: batches prepared ahead of the consumer (the queue bound), >= 1.
        num_workers: threads reading files concurrently, >= 1.
        batch_size: rows per batch.
        prompt_key: the column holding the prompt (a string or a list of chat messages); checked on every row.
        drop_last: drop a final incomplete batch.
        shuffle_files: visit the files in a seeded random order instead of sorted order.
        seed: seed of ``shuffle_files``.
        storage_options: passed to fsspec (credentials, endpoints for ``s3://`` ...).
    """

    def __init__(
        self,
        data_path: str | list[str],
        file_format: str | None = None,
        prefetch_factor: int = 2,
        num_workers: int = 1,
        batch_size: int = 8,
        prompt_key: str = "prompt",
        drop_last: bool = False,
        shuffle_files: bool = False,
        seed: int = 0,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        if file_format is not None and file_format not in FORMATS:
            raise ValueError(f"DataProvider file_format={file_format!r}: expected one of {sorted(FORMATS)}")
        for name, value in (("prefetch_factor", prefetch_factor), ("num_workers", num_workers)):
            if int(value) < 1:
                raise ValueError(f"DataProvider {name}={value!r} must be >= 1")
        if int(batch_size) < 1:
            raise ValueError(f"DataProvider batch_size={batch_size!r} must be >= 1")
        self.data_path = data_path
        self.file_format = file_format
        self.prefetch_factor = int(prefetch_factor)
        self.num_workers = int(num_workers)
        self.batch_size = int(batch_size)
        self.prompt_key = prompt_key
        self.drop_last = bool(drop_last)
        self.shuffle_files = bool(shuffle_files)
        self.seed = int(seed)
        self.storage_options = dict(storage_options or {})
        self.files = self._list_files()
        self.epoch = 0
        self.batches_served = 0
        # batches of the current pass already yielded: an abandoned pass continues here on the next iteration
        self.position = 0

    # ------------------------------------------------------------------------------------------- listing
    def _list_files(self) -> list[str]:
        import fsspec

        paths = [self.data_path] if isinstance(self.data_path, str) else list(self.data_path)
        files: list[str] = []
        for path in paths:
            try:
                fs, root = fsspec.core.url_to_fs(path, **self.storage_options)
            except (ImportError, ValueError) as e:
                raise DataProviderError(f"DataProvider: cannot open {path!r}: {e}") from e
            protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
            local = protocol in ("file", "local")
            if any(ch in root for ch in "*?["):
                found = sorted(fs.glob(root))
            elif fs.isdir(root):
                found = sorted(p for p in fs.find(root) if self._wanted(p))
            elif fs.exists(root):
                found = [root]
            else:
                raise DataProviderError(f"DataProvider: {path!r} does not exist")
            # local files keep plain paths (clearer errors); others become full URLs again for fsspec.open
            files.extend(p if local else fs.unstrip_protocol(p) for p in found)
        if not files:
            raise DataProviderError(f"DataProvider: no {self.file_format or 'parquet/jsonl'} files under {paths!r}")
        for f in files:
            if self._format_of(f) is None:
                raise DataProviderError(
                    f"DataProvider: cannot tell the format of {f!r}; pass file_format='parquet' or 'jsonl'"
                )
        return files

    def _wanted(self, path: str) -> bool:
        fmt = _infer_format(path)
        return fmt is not None and (self.file_format is None or fmt == self.file_format)

    def _format_of(self, path: str) -> str | None:
        return self.file_format or _infer_format(path)

    # ------------------------------------------------------------------------------------------- reading
    def _read_file(self, path: str) -> list[dict[str, Any]]:
        """All rows of one file, as dicts. Any failure is re-raised naming the file."""
        import fsspec

        fmt = self._format_of(path)
        try:
            with fsspec.open(path, "rb", **self.storage_options) as f:
                if fmt == "parquet":
                    import pyarrow.parquet as pq

                    rows = pq.read_table(f).to_pylist()
                else:
                    rows = []
                    for line_no, raw in enumerate(f, start=1):
                        text = raw.decode("utf-8").strip()
                        if not text:
                            continue
                        try:
                            row = json.loads(text)
                        except json.JSONDecodeError as e:
                            raise DataProviderError(f"{path}: line {line_no} is not valid JSON: {e.msg}") from e
                        if not isinstance(row, dict):
                            raise DataProviderError(
                                f"{path}: line {line_no} is a JSON {type(row).__name__}, expected an object"
                            )
                        rows.append(row)
        except DataProviderError:
            raise
        except Exception as e:  # pyarrow, fsspec and OS errors share no base class
            raise DataProviderError(f"DataProvider: cannot read {fmt} file {path}: {type(e).__name__}: {e}") from e
        for i, row in enumerate(rows):
            if self.prompt_key not in row:
                raise DataProviderError(
                    f"{path}: row {i} has no prompt column {self.prompt_key!r}; columns: {sorted(row)}"
                )
        return rows

    def _ordered_files(self) -> list[str]:
        if not self.shuffle_files:
            return list(self.files)
        import random

        files = list(self.files)
        random.Random(epoch_seed(self.seed, self.epoch)).shuffle(files)
        return files

    def _produce(self, out: queue.Queue, stop: threading.Event) -> None:
        """Background thread: read files (``num_workers`` at a time, in order) and enqueue full batches."""
        pending: list[dict[str, Any]] = []

        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            files = self._ordered_files()
            with ThreadPoolExecutor(max_workers=self.num_workers, thread_name_prefix="verl-data") as pool:
                futures: list[Future] = [pool.submit(self._read_file, f) for f in files[: self.num_workers]]
                next_file = len(futures)
                while futures:
                    rows = futures.pop(0).result()
                    if next_file < len(files):  # keep num_workers reads in flight
                        futures.append(pool.submit(self._read_file, files[next_file]))
                        next_file += 1
                    pending.extend(rows)
                    while len(pending) >= self.batch_size:
                        batch, pending = pending[: self.batch_size], pending[self.batch_size :]
                        if not put(_to_columns(batch)):
                            for fut in futures:
                                fut.cancel()
                            return
            if pending and not self.drop_last:
                put(_to_columns(pending))
        except BaseException as e:  # handed to the consumer, raised there
            put(e)
            return
        put(_END)

    def __iter__(self) -> Iterator[dict[str, list[Any]]]:
        """One pass over the data (an epoch), prefetching in a background thread.

        A pass left before its end (``break``, a step budget) is continued by the next iteration: the first
        :attr:`position` batches of the epoch are read again but skipped, so the data order is that of an
        uninterrupted run. :attr:`epoch` counts finished passes.
        """
        out: queue.Queue = queue.Queue(maxsize=self.prefetch_factor)
        stop = threading.Event()
        thread = threading.Thread(target=self._produce, args=(out, stop), daemon=True, name="verl-data-prefetch")
        thread.start()
        skip = self.position
        try:
            while True:
                item = out.get()
                if item is _END:
                    self.epoch += 1
                    self.position = 0
                    break
                if isinstance(item, BaseException):
                    raise item
                if skip > 0:
                    skip -= 1
                    continue
                self.position += 1
                self.batches_served += 1
                yield item
        finally:
            stop.set()
            thread.join(timeout=5.0)

    def state_dict(self) -> dict[str, int]:
        """The read position: ``{"epoch", "position", "batches_served"}`` (saved in a checkpoint's ``data.pt``)."""
        return {"epoch": self.epoch, "position": self.position, "batches_served": self.batches_served}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a :meth:`state_dict`: the next iteration starts at batch ``position`` of pass ``epoch``."""
        missing = [k for k in ("epoch", "position") if k not in state]
        if missing:
            raise KeyError(f"DataProvider state lacks {missing}; expected epoch, position (and batches_served)")
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.batches_served = int(state.get("batches_served", self.batches_served))

    def num_rows(self) -> int:
        """Total number of rows (reads parquet metadata only; JSONL files are counted line by line)."""
        import fsspec

        total = 0
        for path in self.files:
            if self._format_of(path) == "parquet":
                import pyarrow.parquet as pq

                with fsspec.open(path, "rb", **self.storage_options) as f:
                    total += pq.ParquetFile(f).metadata.num_rows
            else:
                total += len(self._read_file(path))
        return total

    def __repr__(self) -> str:
        return f"DataProvider({len(self.files)} files, batch_size={self.batch_size}, prompt_key={self.prompt_key!r})"


def _to_columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Rows -> ``{column: [values]}``; a column missing in some rows is filled with None."""
    keys: list[str] = []
    for row in rows:
        for k in row:
            if k not in keys:
                keys.append(k)
    return {k: [row.get(k) for row in rows] for k in keys}


# --------------------------------------------------------------------------------------- prompt batches
def _prompt_texts_or_ids(prompts: Any, prompt_key: str) -> tuple[list[Any], dict[str, list[Any]]]:
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
    import torch

    from verl.protocol import DataProto

    if isinstance(prompts, DataProto):
        return prompts
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if isinstance(prompts, torch.Tensor):
        rows, extra = _rows_of_tensor(prompts, attention_mask, pad_id), {}
    else:
        items, extra = _prompt_texts_or_ids(prompts, prompt_key)
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
    import numpy as np

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
