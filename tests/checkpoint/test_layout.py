"""Tests of verl/checkpoint/layout.py: tracker, latest checkpoint, retention, resume resolution."""

from __future__ import annotations

import logging
import os

import pytest
from omegaconf import OmegaConf

from verl.checkpoint.layout import (
    COMPLETE_MARKER,
    TRACKER_FILENAME,
    checkpoint_root,
    finalize_checkpoint,
    find_latest_ckpt_path,
    get_checkpoint_step,
    remove_old_checkpoints,
    resolve_resume_path,
)


def _save_step(root, step: int, roles=("actor",), finalize: bool = True) -> str:
    step_dir = os.path.join(root, f"global_step_{step}")
    for role in roles:
        os.makedirs(os.path.join(step_dir, role), exist_ok=True)
        with open(os.path.join(step_dir, role, "w.bin"), "wb") as f:
            f.write(b"x")
    if finalize:
        finalize_checkpoint(str(root), step)
    return step_dir


def test_get_checkpoint_step() -> None:
    assert get_checkpoint_step("/a/global_step_12") == 12
    assert get_checkpoint_step("/a/global_step_12/actor/") == 12
    with pytest.raises(ValueError, match="not a checkpoint path"):
        get_checkpoint_step("/a/step_12")


def test_finalize_writes_tracker_after_marker(tmp_path) -> None:
    step_dir = _save_step(tmp_path, 3, roles=("actor", "critic"))
    assert (tmp_path / TRACKER_FILENAME).read_text().strip() == "3"
    assert os.path.isfile(os.path.join(step_dir, COMPLETE_MARKER))
    assert find_latest_ckpt_path(str(tmp_path)) == step_dir
    with pytest.raises(FileNotFoundError, match="global_step_9"):
        finalize_checkpoint(str(tmp_path), 9)


def test_find_latest_none_when_empty(tmp_path) -> None:
    assert find_latest_ckpt_path(str(tmp_path / "missing")) is None
    assert find_latest_ckpt_path(str(tmp_path)) is None
    assert find_latest_ckpt_path(None) is None


def test_corrupt_tracker_falls_back_to_highest_complete(tmp_path, caplog) -> None:
    _save_step(tmp_path, 2)
    complete = _save_step(tmp_path, 4)
    _save_step(tmp_path, 6, finalize=False)  # crashed mid-save: no marker
    (tmp_path / TRACKER_FILENAME).write_text("garbage\n")
    with caplog.at_level(logging.WARNING):
        assert find_latest_ckpt_path(str(tmp_path)) == complete
    assert "corrupt" in caplog.text


def test_tracker_to_missing_dir_falls_back(tmp_path, caplog) -> None:
    complete = _save_step(tmp_path, 1)
    (tmp_path / TRACKER_FILENAME).write_text("5")
    with caplog.at_level(logging.WARNING):
        assert find_latest_ckpt_path(str(tmp_path)) == complete
    assert "does not exist" in caplog.text


def test_marker_with_missing_role_is_incomplete(tmp_path) -> None:
    good = _save_step(tmp_path, 1, roles=("actor", "critic"))
    bad = _save_step(tmp_path, 2, roles=("actor", "critic"))
    import shutil

    shutil.rmtree(os.path.join(bad, "critic"))
    os.remove(tmp_path / TRACKER_FILENAME)
    assert find_latest_ckpt_path(str(tmp_path)) == good


def test_retention_keeps_newest_n(tmp_path) -> None:
    for step in range(1, 6):
        _save_step(tmp_path, step, roles=("actor", "critic"))
    os.makedirs(tmp_path / "global_step_x" / "actor")
    os.makedirs(tmp_path / "global_step_3_backup" / "actor")
    os.makedirs(tmp_path / "other" / "actor")
    removed = remove_old_checkpoints(str(tmp_path), 2, subdir="actor", current_step=5)
    assert sorted(removed) == sorted(str(tmp_path / f"global_step_{s}" / "actor") for s in (1, 2, 3))
    for step in (1, 2, 3):  # critic untouched, so the step dirs stay
        assert not (tmp_path / f"global_step_{step}" / "actor").exists()
        assert (tmp_path / f"global_step_{step}" / "critic").is_dir()
    for step in (4, 5):
        assert (tmp_path / f"global_step_{step}" / "actor").is_dir()
    for other in ("global_step_x", "global_step_3_backup", "other"):
        assert (tmp_path / other / "actor").is_dir()
    (tmp_path / "global_step_2" / "data.pt").write_bytes(b"driver state")
    # Removing the critic too leaves step dirs without any role (only files), which are deleted.
    remove_old_checkpoints(str(tmp_path), 2, subdir="critic", current_step=5)
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("global_step_")) == [
        "global_step_3_backup",
        "global_step_4",
        "global_step_5",
        "global_step_x",
    ]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_retention_never_removes_just_written_or_tracked(tmp_path) -> None:
    for step in (1, 2, 8, 9):
        _save_step(tmp_path, step, finalize=False)
    finalize_checkpoint(str(tmp_path), 1)  # tracker -> 1
    _save_step(tmp_path, 2)  # resumed from an older step and just wrote step 2; tracker -> 2
    removed = remove_old_checkpoints(str(tmp_path), 1, current_step=2)
    assert removed == [str(tmp_path / "global_step_8" / "actor"), str(tmp_path / "global_step_1" / "actor")]
    assert (tmp_path / "global_step_2" / "actor").is_dir() and (tmp_path / "global_step_9" / "actor").is_dir()
    assert remove_old_checkpoints(str(tmp_path), None) == [] and remove_old_checkpoints(str(tmp_path), 0) == []


def _trainer_cfg(**kw):
    base = {"default_local_dir": None, "namespace": None, "resume_mode": "auto", "resume_from_path": None}
    base.update(kw)
    return OmegaConf.create(base)


def test_resolve_resume_modes(tmp_path) -> None:
    root = tmp_path / "ckpt"
    cfg = _trainer_cfg(default_local_dir=str(root), namespace="ns1")
    assert checkpoint_root(cfg) == str(root / "ns1")
    assert resolve_resume_path(cfg) is None  # nothing saved yet
    latest = _save_step(root / "ns1", 7)
    assert resolve_resume_path(cfg) == latest
    _save_step(root, 9)  # outside the namespace: not seen
    assert resolve_resume_path(cfg) == latest
    assert resolve_resume_path(_trainer_cfg(default_local_dir=str(root), resume_mode="disable")) is None
    cfg_path = _trainer_cfg(default_local_dir=str(root), resume_mode="resume_path", resume_from_path=latest)
    assert resolve_resume_path(cfg_path) == os.path.abspath(latest)
    # an explicit, already namespaced root wins over default_local_dir + namespace
    assert resolve_resume_path(cfg, str(root)) == str(root / "global_step_9")
    # dict configs work too
    assert resolve_resume_path({"default_local_dir": str(root), "resume_mode": "auto"}) == str(root / "global_step_9")


def test_resolve_resume_errors(tmp_path) -> None:
    missing = str(tmp_path / "global_step_3")
    with pytest.raises(FileNotFoundError, match="global_step_3 does not exist"):
        resolve_resume_path(
            _trainer_cfg(default_local_dir=str(tmp_path), resume_mode="resume_path", resume_from_path=missing)
        )
    with pytest.raises(ValueError, match="needs trainer.resume_from_path"):
        resolve_resume_path(_trainer_cfg(default_local_dir=str(tmp_path), resume_mode="resume_path"))
    os.makedirs(tmp_path / "notastep")
    with pytest.raises(ValueError, match="not a global_step_N directory"):
        resolve_resume_path(_trainer_cfg(resume_mode="resume_path", resume_from_path=str(tmp_path / "notastep")))
    with pytest.raises(ValueError, match="'sometimes' is not one of auto, disable, resume_path"):
        resolve_resume_path(_trainer_cfg(default_local_dir=str(tmp_path), resume_mode="sometimes"))
