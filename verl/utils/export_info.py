"""The name of a run's exported model: ``<run>/hf_model/verl_export.json`` says which run and step it is.

Every trainer exports to ``<default_local_dir>/hf_model`` (the path stays the same for scripts that read it), so the
directory's own name says nothing about the run. The export records ``{"name": <trainer.experiment_name>, "step":
N, "run_dir": ...}`` beside the weights, and ``verl serve`` names the served model after it (``model`` in the
OpenAI API) instead of ``hf_model``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from verl.utils.fs import atomic_write_text

__all__ = ["EXPORT_INFO_FILE", "export_name", "write_export_info"]

EXPORT_INFO_FILE = "verl_export.json"
_GENERIC_DIR_NAMES = ("hf_model", "huggingface", "actor", "model")


def write_export_info(export_dir: str, name: str, step: int) -> str:
    """Record which run (``name``: its experiment name) and ``step`` the export in ``export_dir`` is; returns the
    file's path."""
    info: dict[str, Any] = {
        "name": str(name),
        "step": int(step),
        "run_dir": os.path.dirname(os.path.abspath(export_dir)),
    }
    path = os.path.join(export_dir, EXPORT_INFO_FILE)
    atomic_write_text(path, json.dumps(info, indent=2) + "\n")
    return path


def export_name(model_dir: str) -> str:
    """The name to call the model in ``model_dir`` by: the run's name from its ``verl_export.json``; for a
    directory with a generic name (``hf_model``, ``actor``, ...) and no such file, its run directory's name
    (``outputs/verl/demo/hf_model`` -> ``demo``); otherwise the directory's own name."""
    path = os.path.normpath(model_dir)
    info = os.path.join(path, EXPORT_INFO_FILE)
    if os.path.isfile(info):
        try:
            with open(info, encoding="utf-8") as fh:
                name = json.load(fh).get("name")
            if isinstance(name, str) and name:
                return name
        except (OSError, ValueError):
            pass  # an unreadable record: fall back to the directory names
    base = os.path.basename(path)
    if base in _GENERIC_DIR_NAMES:
        parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
        if parent:
            return parent
    return base or str(model_dir)
