"""Raw data sets for the data-preparation scripts (``examples/data_preprocess/``), as upstream verl's scripts read
them: local ``.parquet``/``.jsonl`` files when a path is given, else ``datasets.load_dataset`` from the hub (its cache
under ``HF_HOME``; ``HF_DATASETS_OFFLINE=1`` keeps it offline). Every failure is one line
(:class:`~verl.models.hub.DatasetPathError`) saying how to get the data.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from verl.models.hub import DatasetPathError, display_path

__all__ = ["find_split_file", "load_raw_splits", "read_local_records", "save_splits"]


def read_local_records(path: str) -> list[dict[str, Any]]:
    """The rows of a local ``.parquet`` or ``.jsonl`` file as dicts (a JSON error names the file and line)."""
    if not os.path.isfile(path):
        raise DatasetPathError(f"data file {path} does not exist")
    if not path.endswith((".parquet", ".jsonl", ".json")):
        raise ValueError(f"{path}: expected a .parquet or .jsonl file")
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    records = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {line_no}: invalid JSON: {e}") from e
    return records


def find_split_file(directory: str, split: str) -> str:
    """The one ``.parquet``/``.jsonl`` file under ``directory`` (or one level down, the hub layout
    ``main/train-00000-of-00001.parquet``) whose name starts with ``split``; ValueError naming what was found."""
    candidates = sorted(
        p
        for ext in ("parquet", "jsonl")
        for pattern in (f"{split}*.{ext}", f"*/{split}*.{ext}")
        for p in glob.glob(os.path.join(glob.escape(directory), pattern))
    )
    if len(candidates) != 1:
        raise ValueError(f"expected one {split} file (.parquet or .jsonl) under {directory}, found {candidates}")
    return candidates[0]


def load_raw_splits(
    dataset_id: str,
    splits: Iterable[str],
    config_name: str | None = None,
    local_path: str | None = None,
    split_files: Mapping[str, str | None] | None = None,
) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """The raw rows of each split: ``{split: (where they came from, rows)}``.

    ``split_files[split]`` names a local ``.parquet``/``.jsonl`` file; else ``local_path`` is a directory holding
    one file per split (see :func:`find_split_file`), e.g. a ``hf download --repo-type dataset`` snapshot; else the
    data set is loaded from the hub with ``datasets.load_dataset(dataset_id, config_name)`` (its cache under
    ``HF_HOME``; ``HF_DATASETS_OFFLINE=1`` keeps it offline).

    Raises:
        DatasetPathError: one line when a local path does not exist or the hub data set cannot be loaded.
    """
    splits = list(splits)
    split_files = dict(split_files or {})
    out: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    if local_path is not None:
        local_path = os.path.expanduser(local_path)
        if not os.path.isdir(local_path):
            raise DatasetPathError(f"--local_dataset_path {local_path}: not a directory")
    remaining = []
    for split in splits:
        explicit = split_files.get(split)
        if explicit:
            path = os.path.expanduser(explicit)
        elif local_path is not None:
            path = find_split_file(local_path, split)
        else:
            remaining.append(split)
            continue
        out[split] = (path, read_local_records(path))
    if remaining:
        dataset = _load_hub_dataset(dataset_id, config_name)
        for split in remaining:
            if split not in dataset:
                raise DatasetPathError(f"data set {dataset_id!r} has no split {split!r} (splits: {sorted(dataset)})")
            out[split] = (f"{dataset_id}[{split}]", dataset[split].to_list())
    return {split: out[split] for split in splits}


def _load_hub_dataset(dataset_id: str, config_name: str | None) -> Any:
    """``datasets.load_dataset(dataset_id, config_name)``; every failure becomes one :class:`DatasetPathError`."""
    todo = (
        f"run `hf download {dataset_id} --repo-type dataset --local-dir DIR` on a machine with network and pass "
        "--local_dataset_path DIR"
    )
    try:
        import datasets
    except ImportError:
        raise DatasetPathError(
            f"loading {dataset_id!r} from the hub needs the `datasets` package (pip install 'verl[data]' or "
            f"pip install datasets), or give local files: {todo}"
        ) from None
    name = f"{dataset_id!r}" + (f" (config {config_name!r})" if config_name else "")
    offline = next(
        (
            f"{v}={os.environ[v]} is set"
            for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
            if os.environ.get(v, "0") not in ("", "0")
        ),
        None,
    )
    try:
        return datasets.load_dataset(dataset_id, config_name)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # noqa: BLE001 - every hub failure becomes one actionable line
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        why = offline if offline and isinstance(e, ConnectionError) else f"{type(e).__name__}: {detail}"
        cache = display_path(str(datasets.config.HF_DATASETS_CACHE))
        raise DatasetPathError(
            f"data set {name} is not in the Hugging Face cache ({cache}) and could not be downloaded ({why}): {todo}"
        ) from None


def save_splits(rows: Mapping[str, list[dict[str, Any]]], out_dir: str) -> dict[str, str]:
    """Write each split's rows to ``<out_dir>/<split>.parquet`` atomically (temp file, then ``os.replace``).

    Returns ``{split: path}``; an empty split is refused (ValueError) before anything is written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split, split_rows in rows.items():
        if not split_rows:
            raise ValueError(f"refusing to write an empty {split} split to {out_dir}")
    os.makedirs(out_dir, exist_ok=True)
    written = {}
    for split, split_rows in rows.items():
        path = os.path.join(out_dir, f"{split}.parquet")
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            pq.write_table(pa.Table.from_pylist(list(split_rows)), tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        written[split] = path
    return written
