"""Models and data sets from the Hugging Face hub: one resolution path, downloaded at most once per machine.

A model given as a hub id, ``org/name`` or ``org/name@revision`` (a branch, tag or commit; TRL's ``model_revision``
and transformers' ``revision=`` written into the id), becomes a local snapshot directory:

1. the local Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``) when
   it holds a complete snapshot of that revision: no network call at all;
2. otherwise a download with ``huggingface_hub.snapshot_download`` (its progress bars on stderr) of only the files a
   model needs: ``config.json``, ``generation_config.json``, the tokenizer files, remote code and one weight format,
   safetensors when the repo has them (``pytorch_model*.bin`` only when it has none; never .h5, .msgpack, .onnx,
   .pt, .gguf or sub-folders such as ``original/``). ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HOME`` apply as
   everywhere in huggingface_hub; under ``HF_HUB_OFFLINE=1`` nothing is downloaded.

The download runs under a file lock in the cache, so ranks or workers resolving the same id at once download it
once; the driver resolves every model path of a run (:func:`verl.trainer.run_paths.resolve_config_paths`) before
any worker starts, so the workers find the snapshot in the cache. When a model cannot be had,
:class:`ModelPathError` (a one-line :class:`~verl.trainer.config.validation.ConfigError`, so entry points exit with
code 2 and no traceback) names the id, why, and how to get it.

Raw data sets for the data-preparation scripts are read by :mod:`verl.data.raw_splits`.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from verl.utils.errors import ConfigError

DEFAULT_REVISION = "main"
# huggingface_hub's rule for repo ids: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters.
_NAME = r"[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9_])?"
_REPO_ID_RE = re.compile(rf"^{_NAME}/{_NAME}$")
# Local data files named in data.train_files: a path with one of these endings is never taken for a hub id.
DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".arrow", ".txt")


class HubPathError(ConfigError):
    """A model or data path that is neither local nor obtainable from the hub; its message is ONE line.

    A :class:`ConfigError`, so ``python -m verl.trainer.main_*`` prints it and exits with code 2 (no traceback).
    """

    def __init__(self, message: str) -> None:
        self.problems = [message]
        Exception.__init__(self, message)  # one line, not ConfigError's "invalid config (1 problem):" block


class ModelPathError(HubPathError, FileNotFoundError):
    """A model path that is not a local directory, not a bundled model, and not obtainable from the hub."""


class DatasetPathError(HubPathError, FileNotFoundError):
    """A data set that is not a local file and could not be loaded from the hub."""


@dataclass(frozen=True)
class HubId:
    """A hub model id with an optional revision (``None``: the repo's default branch, ``main``)."""

    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return self.repo_id if self.revision is None else f"{self.repo_id}@{self.revision}"

    @property
    def download_command(self) -> str:
        """The huggingface_hub CLI command that puts this model into the cache."""
        rev = f" --revision {self.revision}" if self.revision else ""
        return f"hf download {self.repo_id}{rev}"


# ------------------------------------------------------------------------------------------------ recognizing ids
def looks_like_local_path(value: str) -> bool:
    """Whether ``value`` is written as a filesystem path: starts with ``/``, ``.``, ``~`` or has two or more ``/``.

    Such a string is never looked up on the hub, so a typo in a local path is reported as a missing directory.
    """
    repo_part = value.split("@", 1)[0]
    return value.startswith(("/", ".", "~", "\\")) or repo_part.count("/") > 1 or "\\" in repo_part


def parse_hub_id(value: str) -> HubId | None:
    """``org/name`` or ``org/name@revision`` -> :class:`HubId`; None when ``value`` is not written as a hub id."""
    value = str(value).strip()
    if not value or looks_like_local_path(value):
        return None
    repo_id, sep, revision = value.partition("@")
    if sep and not revision.strip():
        return None
    if not _REPO_ID_RE.fullmatch(repo_id) or "--" in repo_id or ".." in repo_id or len(repo_id) > 96:
        return None
    return HubId(repo_id, revision.strip() if sep else None)


# ------------------------------------------------------------------------------------------------ which files
_TEXT_SUFFIXES = (".json", ".txt", ".model", ".tiktoken", ".jinja", ".py")


def select_model_files(files: Iterable[str]) -> list[str]:
    """The files of a hub model repo that loading it needs, from the repo's file list.

    Root-level configs and tokenizer files (``*.json``, ``*.txt``, ``*.model``, ``*.tiktoken``, ``*.jinja``), remote
    code (``*.py``), ``additional_chat_templates/*.jinja``, and one weight format: the safetensors shards (those
    named by ``*.safetensors.index.json`` when there is one, so a duplicate ``consolidated.safetensors`` is left
    out), else ``pytorch_model*.bin``. Everything else (README, images, .h5/.msgpack/.onnx/.pt/.gguf weights,
    sub-folders such as ``original/`` or ``onnx/``) is skipped.
    """
    files = sorted(set(files))
    root = [f for f in files if "/" not in f]
    safetensors = [f for f in root if f.endswith(".safetensors")]
    st_indexes = [f for f in root if f.endswith(".safetensors.index.json")]
    if st_indexes:
        prefixes = tuple(f[: -len(".safetensors.index.json")] for f in st_indexes)
        weights = [f for f in safetensors if f.startswith(prefixes)]
    else:
        weights = [f for f in safetensors if not f.startswith("consolidated")] or safetensors
    skipped_index: tuple[str, ...] = ()
    if not weights:
        weights = [f for f in root if f.startswith("pytorch_model") and f.endswith(".bin")]
    else:  # the .bin index would point at files that are not downloaded
        skipped_index = tuple(f for f in root if f.endswith(".bin.index.json"))
    small = [f for f in root if f.endswith(_TEXT_SUFFIXES) and f not in skipped_index]
    templates = [f for f in files if f.startswith("additional_chat_templates/") and f.endswith(".jinja")]
    return sorted(set(small + weights + templates))


def _weights_present(directory: str) -> bool:
    """Whether ``directory`` holds a complete set of weights (every shard of an index, or one weight file)."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = os.path.join(directory, index_name)
        if os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as fh:
                    shards = set(json.load(fh).get("weight_map", {}).values())
            except (OSError, ValueError):
                return False
            return bool(shards) and all(os.path.isfile(os.path.join(directory, s)) for s in shards)
    names = os.listdir(directory)
    # isfile follows the cache's symlinks, so a snapshot whose blob was deleted does not count
    return any(
        (n.endswith(".safetensors") or (n.startswith("pytorch_model") and n.endswith(".bin")))
        and os.path.isfile(os.path.join(directory, n))
        for n in names
    )


def snapshot_is_complete(directory: str, require_weights: bool = True) -> bool:
    """A loadable model directory: ``config.json`` (or, for a tokenizer only, ``tokenizer_config.json``) and weights."""
    if not os.path.isdir(directory):
        return False
    if not require_weights:
        return any(os.path.isfile(os.path.join(directory, f)) for f in ("config.json", "tokenizer_config.json"))
    return os.path.isfile(os.path.join(directory, "config.json")) and _weights_present(directory)


# ------------------------------------------------------------------------------------------------ environment
def hub_cache_dir() -> str:
    """The Hugging Face hub cache directory (``HF_HUB_CACHE`` / ``HF_HOME``), as huggingface_hub computed it."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def hub_endpoint() -> str:
    """The hub endpoint (``HF_ENDPOINT``, default ``https://huggingface.co``)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def display_path(path: str) -> str:
    home = str(Path.home())
    return "~" + path[len(home) :] if path == home or path.startswith(home + os.sep) else path


def offline_reason() -> str | None:
    """Why downloads are off (``"HF_HUB_OFFLINE=1 is set"``), or None when huggingface_hub may use the network."""
    from huggingface_hub import constants

    if not constants.is_offline_mode():
        return None
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return f"{var}={os.environ[var]} is set"
    return "huggingface_hub is in offline mode"


@contextlib.contextmanager
def _download_lock(hub_id: HubId) -> Iterator[None]:
    """An exclusive lock per repo in the cache's ``.locks`` folder, so concurrent resolvers download once."""
    from huggingface_hub.file_download import repo_folder_name

    lock_dir = Path(hub_cache_dir()) / ".locks" / repo_folder_name(repo_id=hub_id.repo_id, repo_type="model")
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / "verl-snapshot.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------------ models
def cached_model_snapshot(hub_id: HubId, require_weights: bool = True) -> str | None:
    """The cache's snapshot directory of ``hub_id`` when it is complete (see :func:`snapshot_is_complete`); never
    touches the network. A branch or tag resolves through the cache's ``refs/``, a commit hash directly."""
    from huggingface_hub import try_to_load_from_cache

    for probe in ("config.json", "tokenizer_config.json"):
        found = try_to_load_from_cache(
            hub_id.repo_id, probe, cache_dir=hub_cache_dir(), revision=hub_id.revision or DEFAULT_REVISION
        )
        if isinstance(found, str):
            snapshot = os.path.dirname(found)
            return snapshot if snapshot_is_complete(snapshot, require_weights) else None
    return None


def _failure_hint(hub_id: HubId, error: BaseException) -> tuple[str, str]:
    """``(why the download failed, what to do)`` for an exception from huggingface_hub."""
    from huggingface_hub.errors import (
        DisabledRepoError,
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    local = "or pass a local directory"
    url = f"{hub_endpoint()}/{hub_id.repo_id}"
    token_set = bool(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))
    if isinstance(error, OfflineModeIsEnabled):
        return offline_reason() or "offline mode", f"run `{hub_id.download_command}` on a machine with network, {local}"
    if isinstance(error, GatedRepoError):
        who = "the token in HF_TOKEN has no access" if token_set else "HF_TOKEN is not set"
        return (
            f"the repository is gated and {who}",
            f"accept its terms on {url} and set HF_TOKEN (or run `hf auth login`), {local}",
        )
    if isinstance(error, RevisionNotFoundError):
        return f"{url} has no revision {hub_id.revision!r}", f"check the branch, tag or commit after '@', {local}"
    if isinstance(error, RepositoryNotFoundError):
        why = "no such repository, or it is private" + ("" if token_set else " and HF_TOKEN is not set")
        return f"{why} ({url})", f"check the id (org/name), set HF_TOKEN for a private repository, {local}"
    if isinstance(error, DisabledRepoError):
        return f"the repository {url} is disabled", local
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, HfHubHTTPError) and status is not None:
        return f"HTTP {status} from {hub_endpoint()}", f"retry later, or run `{hub_id.download_command}`, {local}"
    detail = str(error).strip().splitlines()[0][:160] if str(error).strip() else ""
    why = f"cannot reach {hub_endpoint()}: {type(error).__name__}" + (f": {detail}" if detail else "")
    return why, f"run `{hub_id.download_command}` on a machine with network, {local}"


def _model_error(hub_id: HubId, why: str, todo: str) -> ModelPathError:
    cache = display_path(hub_cache_dir())
    return ModelPathError(
        f"model {str(hub_id)!r} is not a local directory, not in the Hugging Face cache ({cache}), and could not be "
        f"downloaded ({why}): {todo}"
    )


def download_model_snapshot(hub_id: HubId) -> str:
    """Download the files :func:`select_model_files` picks from the hub into the cache; returns the snapshot dir.

    Lists the repo (``model_info``), prints one line naming the files and their size, then calls
    ``snapshot_download`` with exactly those files (its progress bars show on stderr). Raises huggingface_hub's
    errors unchanged (the caller turns them into :class:`ModelPathError`).
    """
    from huggingface_hub import HfApi, snapshot_download

    revision = hub_id.revision or DEFAULT_REVISION
    endpoint = hub_endpoint()  # passed on: snapshot_download's file URLs would otherwise use the import-time value
    info = HfApi(endpoint=endpoint).model_info(hub_id.repo_id, revision=revision, files_metadata=True)
    siblings = list(info.siblings or [])
    wanted = select_model_files(s.rfilename for s in siblings)
    size = sum(int(s.size or 0) for s in siblings if s.rfilename in set(wanted))
    skipped = len(siblings) - len(wanted)
    # stderr, like the progress bars under it: the user sees why the run pauses, whatever the logging setup
    print(
        f"verl: downloading model {str(hub_id)!r} from {hub_endpoint()} into {display_path(hub_cache_dir())}: "
        f"{len(wanted)} files, {size / 2**20:.1f} MiB ({skipped} other files in the repo skipped)",
        file=sys.stderr,
        flush=True,
    )
    return snapshot_download(
        hub_id.repo_id,
        revision=revision,
        allow_patterns=[glob.escape(f) for f in wanted],
        cache_dir=hub_cache_dir(),
        endpoint=endpoint,
    )


def resolve_hub_model(hub_id: HubId, require_weights: bool = True) -> str:
    """The local snapshot directory of ``hub_id``: from the cache when complete, else downloaded (under a lock).

    Raises:
        ModelPathError: one line naming the id, why it could not be had (offline, no network, gated, missing repo
            or revision, not a transformers model) and what to do.
    """
    cached = cached_model_snapshot(hub_id, require_weights)
    if cached is not None:
        return cached
    offline = offline_reason()
    if offline is not None:
        raise _model_error(
            hub_id, offline, f"run `{hub_id.download_command}` on a machine with network, or pass a local directory"
        )
    with _download_lock(hub_id):
        cached = cached_model_snapshot(hub_id, require_weights)  # another process finished while we waited
        if cached is not None:
            return cached
        try:
            snapshot = download_model_snapshot(hub_id)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - every hub failure becomes one actionable line
            raise _model_error(hub_id, *_failure_hint(hub_id, e)) from None
    if not os.path.isfile(os.path.join(snapshot, "config.json")) and require_weights:
        raise ModelPathError(
            f"model {str(hub_id)!r} was downloaded to {snapshot} but has no config.json: it is not a transformers "
            "model repository (a LoRA adapter needs its base model as the model path)"
        )
    if require_weights and not _weights_present(snapshot):
        raise ModelPathError(
            f"model {str(hub_id)!r} was downloaded to {snapshot} but has no safetensors or pytorch_model*.bin "
            "weights (other formats such as .h5, .msgpack or .gguf are not loaded)"
        )
    return snapshot
