"""A model directory's own code, and what ``trust_remote_code`` is given to transformers for it.

transformers runs a repository's Python files only where one of its JSON configs names them under ``auto_map``
(``config.json`` for the model and its config, ``tokenizer_config.json`` for the tokenizer, the processor configs
for a vision-language model's processor). A directory without an ``auto_map`` has no code to run, and
``trust_remote_code=true`` changes nothing there: upstream verl's scripts pass it out of habit for models transformers
builds itself (Qwen2.5, Qwen3, Llama). So the security switch (``trainer.allow_unsafe_operations``,
:mod:`verl.utils.security`) guards the code, not the key:

- the config checks refuse ``trust_remote_code=true`` without the switch only when they can see code: the model
  path is a local directory or a snapshot in the Hugging Face cache whose configs hold an ``auto_map``
  (:func:`visible_code`); a hub id not downloaded yet cannot be looked into then;
- every load (:func:`trust_remote_code_for`, called by :mod:`verl.models.loader`, the processor and the vLLM engine)
  looks again once the files are local: no code, ``False`` goes to transformers; code and the switch on, ``True``;
  code and the switch off, :class:`~verl.utils.security.UnsafeOperationError` before anything of it runs.
"""

from __future__ import annotations

import json
import os

from verl.utils.security import require_unsafe

__all__ = ["CODE_CONFIGS", "code_entries", "trust_remote_code_for", "visible_code"]

# the JSON configs whose auto_map makes transformers import the repository's own modules
CODE_CONFIGS = (
    "config.json",
    "tokenizer_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)


def code_entries(local_dir: str) -> list[str]:
    """``file: auto_map class -> module`` for each class a config of ``local_dir`` maps to the directory's own
    code (empty: transformers runs none of it). An unreadable or malformed config is named too: it cannot be
    shown to hold no code."""
    found: list[str] = []
    for name in CODE_CONFIGS:
        path = os.path.join(local_dir, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            found.append(f"{name}: unreadable ({type(e).__name__})")
            continue
        auto_map = doc.get("auto_map") if isinstance(doc, dict) else None
        if auto_map:
            items = auto_map.items() if isinstance(auto_map, dict) else [("auto_map", auto_map)]
            found.extend(f"{name}: {cls} -> {target}" for cls, target in items)
    return found


def trust_remote_code_for(local_dir: str, requested: bool, key: str = "trust_remote_code") -> bool:
    """The ``trust_remote_code`` to pass to transformers for the resolved model directory ``local_dir``: ``False``
    when not ``requested`` or when the directory has no code of its own (:func:`code_entries`); ``True`` when it has
    and the security switch is on.

    Raises:
        UnsafeOperationError: ``requested``, the directory has code, and ``trainer.allow_unsafe_operations`` is off
            (the message names ``key``, the directory and its ``auto_map`` entries).
    """
    if not requested:
        return False
    entries = code_entries(local_dir)
    if not entries:
        return False
    require_unsafe(f"{key}=true with {local_dir}, whose own Python code would run ({'; '.join(entries[:3])})")
    return True


def visible_code(path: str | None) -> list[str] | None:
    """The ``auto_map`` entries of model path ``path`` (:func:`code_entries`) where its files can be looked at
    without loading anything: a local directory, a bundled model (none), a hub id already in the cache. ``None``:
    not visible now (a hub id not downloaded, a path that does not exist); the load decides then."""
    if not path:
        return None
    from verl.models.hub import cached_model_snapshot, parse_hub_id
    from verl.models.loader import BUNDLED_MODELS, BUNDLED_PREFIX

    raw = str(path).strip()
    local = os.path.expanduser(raw)
    if os.path.isdir(local):
        return code_entries(local)
    name = raw[len(BUNDLED_PREFIX) :] if raw.startswith(BUNDLED_PREFIX) else raw
    if name.lower() in BUNDLED_MODELS:
        return []  # converted from a GGUF file: configs of our own, no code
    hub_id = parse_hub_id(raw)
    snapshot = cached_model_snapshot(hub_id, require_weights=False) if hub_id is not None else None
    return code_entries(snapshot) if snapshot is not None else None
