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


def __getattr__(name: str) -> Any:
    """``encode_prompts`` (:func:`verl.data.prompt_batch.encode_prompts`), loaded on first use so that importing
    ``DataProvider`` does not import torch."""
    if name == "encode_prompts":
        from verl.data.prompt_batch import encode_prompts

        return encode_prompts
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
