"""``trust_remote_code=true`` without the security switch: refused where the model's own code can be seen.

A model directory runs code of its own only through an ``auto_map`` in its configs
(:mod:`verl.models.remote_code`). The config checks of every entry point look at each model path whose
``trust_remote_code`` is set: a local directory or a cached hub snapshot with an ``auto_map`` is refused unless
``trainer.allow_unsafe_operations=true``; one without runs no code, so the key changes nothing and is accepted (as
in transformers); a path not visible yet (a hub id to download) is left to the load, which refuses before any of the
code runs.
"""

from __future__ import annotations

__all__ = ["remote_code_errors"]


def remote_code_errors(requested: list[tuple[str, str | None]], allowed: bool) -> list[str]:
    """One line per model path whose code would run: ``requested`` holds ``(key, model path)`` for every
    ``trust_remote_code`` key set to true (``data.trust_remote_code`` with the tokenizer's path, ...); ``allowed``
    is ``trainer.allow_unsafe_operations``. Keys sharing a path share a line."""
    if allowed or not requested:
        return []
    from verl.models.remote_code import visible_code

    by_path: dict[str, list[str]] = {}
    for key, path in requested:
        by_path.setdefault(str(path), []).append(key)
    errors = []
    for path, keys in by_path.items():
        entries = visible_code(path)
        if entries:
            shown = "; ".join(entries[:2]) + (f"; {len(entries) - 2} more" if len(entries) > 2 else "")
            errors.append(
                f"{', '.join(keys)}=true runs Python files from the model directory {path} ({shown}), which is not "
                "allowed here unless trainer.allow_unsafe_operations=true (the security switch): add it to run the "
                "model's code"
            )
    return errors
