"""Checkpoint integrity: checksums in the completion marker, verification on resume with fallback to the previous
intact checkpoint, errors that name the file, removal of killed saves' temp dirs, refusing a used directory."""

from __future__ import annotations

import json
import logging
import os

import pytest

from verl.checkpoint.integrity import CheckpointCorruptError, compute_checksums, remove_stale_temp_dirs
from verl.checkpoint.layout import (
    COMPLETE_MARKER,
    TRACKER_FILENAME,
    checkpoint_problems,
    finalize_checkpoint,
    find_latest_ckpt_path,
    prepare_checkpoint_root,
    resolve_resume_path,
)


def _warnings(records: list[logging.LogRecord]) -> str:
    return "\n".join(r.getMessage() for r in records if r.levelno >= logging.WARNING)


def _save_step(root, step: int, payload: bytes = b"weights" * 100) -> str:
    step_dir = os.path.join(root, f"global_step_{step}")
    os.makedirs(os.path.join(step_dir, "actor", "huggingface"))
    with open(os.path.join(step_dir, "actor", "huggingface", "model.safetensors"), "wb") as f:
        f.write(payload)
    with open(os.path.join(step_dir, "data.pt"), "wb") as f:
        f.write(b"driver state")
    finalize_checkpoint(str(root), step)
    return step_dir


def test_marker_records_every_file(tmp_path):
    step_dir = _save_step(tmp_path, 1)
    body = json.loads(open(os.path.join(step_dir, COMPLETE_MARKER)).read())
    assert set(body["files"]) == {"actor/huggingface/model.safetensors", "data.pt"}
    assert body["files"]["data.pt"]["size"] == len(b"driver state")
    assert body["files"] == compute_checksums(step_dir, exclude=(COMPLETE_MARKER,))
    assert checkpoint_problems(step_dir) == []


@pytest.mark.parametrize("damage", ["zeros", "truncate", "remove"])
def test_damaged_checkpoint_is_named_and_the_previous_one_used(tmp_path, verl_logs, damage):
    _save_step(tmp_path, 1)
    step2 = _save_step(tmp_path, 2)
    weights = os.path.join(step2, "actor", "huggingface", "model.safetensors")
    if damage == "zeros":  # same size, part of the bytes zeroed: only the checksum can tell
        with open(weights, "r+b") as f:
            f.seek(100)
            f.write(b"\0" * 200)
    elif damage == "truncate":
        os.truncate(weights, 10)
    else:
        os.remove(weights)
    expected = {"zeros": "content differs", "truncate": "10 bytes, 700 when saved", "remove": "missing"}[damage]
    problems = checkpoint_problems(step2)
    assert len(problems) == 1 and weights in problems[0] and expected in problems[0]
    assert find_latest_ckpt_path(str(tmp_path)) == os.path.join(tmp_path, "global_step_1")
    warned = _warnings(verl_logs)
    assert weights in warned and "global_step_1" in warned
    # a checkpoint the user names is never silently replaced: the error lists the bad file
    cfg = {"resume_mode": "resume_path", "resume_from_path": step2, "default_local_dir": str(tmp_path)}
    with pytest.raises(CheckpointCorruptError, match=f"{weights}.*{expected}"):
        resolve_resume_path(cfg)


def test_tracker_pointing_at_a_directory_without_marker_is_not_trusted(tmp_path, verl_logs):
    _save_step(tmp_path, 1)
    step2 = _save_step(tmp_path, 2)
    os.remove(os.path.join(step2, COMPLETE_MARKER))  # e.g. killed between the rename and the marker
    assert open(os.path.join(tmp_path, TRACKER_FILENAME)).read().strip() == "2"
    assert find_latest_ckpt_path(str(tmp_path)).endswith("global_step_1")
    assert "no valid checkpoint_complete.json" in _warnings(verl_logs)
    # nothing intact at all: None, never the partial one
    os.remove(os.path.join(tmp_path, "global_step_1", "data.pt"))
    assert find_latest_ckpt_path(str(tmp_path)) is None


def test_marker_without_checksums_is_still_accepted(tmp_path):
    step_dir = _save_step(tmp_path, 1)
    marker = os.path.join(step_dir, COMPLETE_MARKER)
    body = json.loads(open(marker).read())
    del body["files"]
    with open(marker, "w") as f:
        json.dump(body, f)
    assert find_latest_ckpt_path(str(tmp_path)) == step_dir


def test_stale_temp_dirs_of_killed_saves_are_removed(tmp_path):
    step1 = _save_step(tmp_path, 1)
    leftovers = [
        tmp_path / ".tmp-global_step_2.abc123",  # a save killed before its rename
        tmp_path / ".tmp-rm-global_step_0-deadbeef",  # retention killed mid-delete
        tmp_path / "global_step_1" / ".tmp-rm-critic-0123abcd",
    ]
    for d in leftovers:
        os.makedirs(d / "actor")
        (d / "actor" / "big.bin").write_bytes(b"x" * 1000)
    (tmp_path / ".tmp-latest_checkpointed_iteration.txt.xyz").write_text("7")
    removed = remove_stale_temp_dirs(str(tmp_path))
    assert len(removed) == 4
    assert not any(d.exists() for d in leftovers)
    assert sorted(os.listdir(tmp_path)) == ["global_step_1", TRACKER_FILENAME]
    assert checkpoint_problems(step1) == []  # the real checkpoint is untouched


def test_disable_in_a_used_directory_refuses_unless_overwrite(tmp_path, verl_logs):
    prepare_checkpoint_root(str(tmp_path / "fresh"), "disable")  # nothing there: fine
    _save_step(tmp_path, 3)
    with pytest.raises(FileExistsError, match=r"resume_mode=disable but .* already holds checkpoints.*global_step_3"):
        prepare_checkpoint_root(str(tmp_path), "disable")
    assert os.path.isdir(tmp_path / "global_step_3")
    prepare_checkpoint_root(str(tmp_path), "auto")  # resuming is what a used directory is for
    prepare_checkpoint_root(str(tmp_path), "disable", overwrite=True)
    assert "deleting 1 old checkpoints" in _warnings(verl_logs)
    assert not os.path.exists(tmp_path / "global_step_3") and not os.path.exists(tmp_path / TRACKER_FILENAME)
