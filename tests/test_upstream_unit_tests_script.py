"""scripts/upstream_unit_tests.py counts a test file's passes the way docs/porting_from_verl.md reports them: the
collected cases of a file that imports, every ``def test_`` of one that does not; and it refuses to write upstream
files into this repository."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "upstream_unit_tests.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("upstream_unit_tests", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_counts_cases_and_import_errors(script, tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_a(x):\n    assert x == 1\n\n"
        "def test_b():\n    pass\n"
    )
    (tmp_path / "test_broken.py").write_text(
        "from verl.no_such_module import x\n\ndef test_a():\n    pass\n\ndef test_b():\n    pass\n"
    )
    assert script.run_file(tmp_path, "test_ok.py", 120) == {
        "passed": 2,
        "total": 3,
        "skipped": 0,
        "import_error": False,
    }
    broken = script.run_file(tmp_path, "test_broken.py", 120)
    assert (broken["passed"], broken["total"], broken["import_error"]) == (0, 2, True)


def test_refuses_to_extract_into_the_repository(script) -> None:
    with pytest.raises(SystemExit, match="inside this repository"):
        script.extract(Path("/nonexistent-mirror"), "HEAD", SCRIPT.parents[1] / "build" / "upstream_tests")


def test_excluded_cases_leave_the_count(script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every exclusion of the real list names a test file of the run and gives a one-line reason
    assert all(key.split("::")[0] in script.TEST_FILES for key in script.EXCLUDED)
    assert all(reason and "\n" not in reason for reason in script.EXCLUDED.values())
    (tmp_path / "test_mixed.py").write_text("def test_a():\n    assert False\n\ndef test_b():\n    pass\n")
    monkeypatch.setattr(script, "EXCLUDED", {"test_mixed.py::test_a": "a reason"})
    assert script.excluded_in("test_mixed.py") == ["test_mixed.py::test_a"]
    counted = script.run_file(tmp_path, "test_mixed.py", 120)
    assert (counted["passed"], counted["total"]) == (1, 1)
    everything = script.run_file(tmp_path, "test_mixed.py", 120, exclusions=False)
    assert (everything["passed"], everything["total"]) == (1, 2)


def test_only_runs_the_matching_files(script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit, match="no file of TEST_FILES matches"):
        script.main(["--mirror", "/nonexistent-mirror", "--out", str(tmp_path), "--only", "no_such_test_file"])
    ran: list[str] = []
    monkeypatch.setattr(script, "extract", lambda mirror, ref, out: None)
    monkeypatch.setattr(
        script,
        "run_file",
        lambda out, rel, timeout_s, exclusions: (
            ran.append(rel) or {"passed": 1, "total": 1, "skipped": 0, "import_error": False}
        ),
    )
    script.main(["--mirror", "/nonexistent-mirror", "--out", str(tmp_path), "--only", "test_torch_functional"])
    assert ran == ["tests/utils/test_torch_functional.py"]
