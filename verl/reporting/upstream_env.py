"""Upstream verl's logging environment variables (``verl/utils/tracking.py`` there), honoured here.

- ``VERL_FILE_LOGGER_PATH`` / ``VERL_FILE_LOGGER_ROOT``: upstream's ``file`` logger writes one ``{"step": N,
  "data": {...}}`` line per logged step to ``VERL_FILE_LOGGER_PATH``, else to
  ``<VERL_FILE_LOGGER_ROOT>/<project>/<experiment>.jsonl``; its CI compares runs by reading these files
  (``tests/special_e2e/sft/compare_sft_engine_results.py``). With either variable set and the ``file`` backend on,
  the same file is written here too, next to ``metrics.jsonl`` (which is written as always). Non-finite values
  are ``null`` there, as upstream's ``orjson`` writes them.
- ``TENSORBOARD_DIR``: the TensorBoard backend writes there instead of ``<log_dir>/tensorboard``.

Upstream's SFT trainers name their metrics ``train/<name>`` and ``val/<name>``; :func:`upstream_sft_name` gives
those names to the file above for the SFT entry points that follow upstream (``trainer.upstream_log_names``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping

from verl.utils.fs import makedirs

__all__ = ["UpstreamFileLog", "tensorboard_dir", "upstream_file_path", "upstream_sft_name"]


def upstream_file_path(project_name: str, experiment_name: str) -> str | None:
    """Where upstream's ``file`` logger would write, or None when neither variable is set."""
    path = os.environ.get("VERL_FILE_LOGGER_PATH")
    if path:
        return os.path.expanduser(path)
    root = os.environ.get("VERL_FILE_LOGGER_ROOT")
    if root:
        return os.path.join(os.path.expanduser(root), project_name, f"{experiment_name}.jsonl")
    return None


def tensorboard_dir(default: str) -> str:
    """``TENSORBOARD_DIR`` when set, else ``default``."""
    return os.path.expanduser(os.environ.get("TENSORBOARD_DIR") or default)


def upstream_sft_name(key: str) -> str:
    """A metric name of the SFT trainer as upstream's SFT trainer logs it: ``eval/loss`` -> ``val/loss``, ``loss``
    -> ``train/loss``."""
    return f"val/{key[len('eval/') :]}" if key.startswith("eval/") else f"train/{key}"


class UpstreamFileLog:
    """Upstream's JSONL metrics file: ``{"step": N, "data": {name: value}}`` per logged step, names passed through
    ``rename``. A fresh run (``keep_through_step`` -1) starts the file anew, as upstream opens it for writing; a
    resumed one keeps the rows up to its step."""

    def __init__(
        self, path: str, keep_through_step: int | None = None, rename: Callable[[str], str] | None = None
    ) -> None:
        from verl.reporting.backends import drop_rows_after

        makedirs(os.path.dirname(os.path.abspath(path)))
        if keep_through_step is not None:
            drop_rows_after(path, keep_through_step)
        self.path = path
        self.rename = rename
        self._f = open(path, "a", encoding="utf-8")

    def log(self, data: Mapping[str, int | float], step: int) -> None:
        named = {(self.rename(k) if self.rename else k): v for k, v in data.items()}
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in named.items()}
        self._f.write(json.dumps({"step": step, "data": clean}, allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()
