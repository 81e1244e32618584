"""Tests of verl/utils/fs.py: atomic files and directories, namespaces, local copies."""

from __future__ import annotations

import os

import pytest

from verl.utils.fs import (
    atomic_directory,
    atomic_write_bytes,
    atomic_write_text,
    copy_to_local,
    namespaced_path,
    validate_namespace,
)


def _entries(path: str) -> list[str]:
    return sorted(os.listdir(path))


def test_atomic_write_text_and_bytes(tmp_path) -> None:
    target = tmp_path / "sub" / "a.txt"
    atomic_write_text(str(target), "one")
    atomic_write_text(str(target), "two")
    assert target.read_text() == "two"
    atomic_write_bytes(str(tmp_path / "b.bin"), b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert _entries(tmp_path / "sub") == ["a.txt"]  # no temp file left behind
    with pytest.raises(TypeError, match="must be str"):
        atomic_write_text(str(target), b"bytes")  # type: ignore[arg-type]


def test_atomic_directory_creates_and_replaces(tmp_path) -> None:
    final = tmp_path / "model"
    with atomic_directory(str(final)) as tmp:
        assert not final.exists()  # nothing visible until the block ends
        (open(os.path.join(tmp, "w.txt"), "w")).write("v1")
    assert (final / "w.txt").read_text() == "v1"
    with atomic_directory(str(final)) as tmp:
        (open(os.path.join(tmp, "x.txt"), "w")).write("v2")
    assert _entries(final) == ["x.txt"]
    assert _entries(tmp_path) == ["model"]


def test_atomic_directory_exception_keeps_previous(tmp_path) -> None:
    final = tmp_path / "ckpt"
    final.mkdir()
    (final / "weights.bin").write_bytes(b"old")

    with pytest.raises(RuntimeError, match="boom"):
        with atomic_directory(str(final)) as tmp:
            with open(os.path.join(tmp, "weights.bin"), "wb") as f:
                f.write(b"half")
            raise RuntimeError("boom")

    assert (final / "weights.bin").read_bytes() == b"old"
    assert _entries(tmp_path) == ["ckpt"]  # the temp dir is gone


def test_atomic_directory_no_overwrite(tmp_path) -> None:
    final = tmp_path / "d"
    final.mkdir()
    with pytest.raises(FileExistsError, match="overwrite=False"):
        with atomic_directory(str(final), overwrite=False):
            pass
    assert _entries(tmp_path) == ["d"]


@pytest.mark.parametrize("ns", ["a", "team-1", "search_rl.v2", "A" * 64, "0abc"])
def test_validate_namespace_accepts(ns: str) -> None:
    assert validate_namespace(ns) == ns


@pytest.mark.parametrize("ns", ["", "/", "a/b", "..", ".", ".hidden", "-x", "a b", "A" * 65, "a\\b", "é", "_x"])
def test_validate_namespace_rejects(ns: str) -> None:
    with pytest.raises(ValueError, match="invalid namespace"):
        validate_namespace(ns)


def test_validate_namespace_rejects_non_string() -> None:
    with pytest.raises(ValueError, match="must be a string"):
        validate_namespace(3)  # type: ignore[arg-type]


def test_namespaced_path() -> None:
    assert namespaced_path("out/logs", None) == "out/logs"
    assert namespaced_path("out/logs", "rl-a") == os.path.join("out/logs", "rl-a")
    with pytest.raises(ValueError, match="invalid namespace"):
        namespaced_path("out", "../escape")
    with pytest.raises(ValueError, match="invalid namespace"):
        namespaced_path("out", "")


def test_copy_to_local_local_path(tmp_path) -> None:
    f = tmp_path / "x.txt"
    f.write_text("hi")
    assert copy_to_local(str(f)) == str(f)
    assert copy_to_local("file://" + str(f)) == str(f)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        copy_to_local(str(tmp_path / "missing"))


def test_copy_to_local_remote_memory_fs(tmp_path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/verl-test/data.txt", b"remote bytes")
    local = copy_to_local("memory://verl-test/data.txt", cache_dir=str(tmp_path))
    assert open(local, "rb").read() == b"remote bytes"
    assert local.startswith(str(tmp_path))
