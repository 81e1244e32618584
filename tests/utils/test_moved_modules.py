"""verl's ``verl.utils.*`` paths of the packages that moved into rooms of their own (verl/utils/_moved.py) name the
SAME module objects as the new paths, for every moved module; ``import verl`` imports none of them."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import verl
from verl.utils import _moved

REPO = Path(verl.__file__).resolve().parents[1]


def _moved_modules(table: dict[str, str] = _moved.MOVED) -> list[tuple[str, str]]:
    """(old path, new path) of every module file under the moved packages and modules of ``table``."""
    pairs: list[tuple[str, str]] = []
    for old, new in table.items():
        if _moved.new_name(old) != new:  # shadowed by a longer entry (never, but keep the walk honest)
            continue
        pairs.append((old, new))
        base = REPO.joinpath(*new.split("."))
        if not (base / "__init__.py").is_file():
            continue
        for info in pkgutil.walk_packages([str(base)], prefix=new + "."):
            sub_old = old + info.name[len(new) :]
            if _moved.new_name(sub_old) == info.name:  # verl.data.arithmetic_task has its own old name
                pairs.append((sub_old, info.name))
    return pairs


MOVED_MODULES = _moved_modules()
# verl's paths outside verl.utils of modules that live on another floor here (the asynchronous trainers, the sections)
RELOCATED_MODULES = _moved_modules(_moved.RELOCATED)


def test_the_walk_finds_the_moved_modules() -> None:
    names = {new for _, new in MOVED_MODULES}
    assert {"verl.rewards.gsm8k", "verl.reporting.report.render", "verl.data.rl_dataset"} <= names
    assert ("verl.utils.dataset.arithmetic", "verl.data.arithmetic_task") in MOVED_MODULES
    assert len(MOVED_MODULES) > 80


def test_the_walk_finds_the_relocated_modules() -> None:
    pairs = set(RELOCATED_MODULES)
    assert {
        (
            "verl.experimental.fully_async_policy.fully_async_trainer",
            "verl.trainer.fully_async_policy.fully_async_trainer",
        ),
        ("verl.experimental.fully_async_policy.rollouter", "verl.trainer.fully_async_policy.rollouter"),
        ("verl.experimental.one_step_off_policy.ray_trainer", "verl.trainer.one_step_off_policy.ray_trainer"),
        ("verl.workers.config.actor", "verl.sections.actor"),
        ("verl.workers.config.optimizer", "verl.sections.optimizer"),
        ("verl.workers.config.reward_model", "verl.sections.reward_model"),
    } <= pairs
    # every section module is served under verl's name, and the package face stays a real package
    sections = {info.name for info in pkgutil.iter_modules([str(REPO / "verl" / "sections")])}
    assert sections == set(_moved.SECTION_MODULES)
    assert _moved.new_name("verl.workers.config") is None


@pytest.mark.parametrize(
    ("old", "new"), MOVED_MODULES + RELOCATED_MODULES, ids=[old for old, _ in MOVED_MODULES + RELOCATED_MODULES]
)
def test_old_path_is_the_same_module(old: str, new: str) -> None:
    if new.endswith("__main__"):
        pytest.skip("a __main__ module runs its command when imported")
    try:
        new_module = importlib.import_module(new)
    except ImportError as e:  # an optional dependency of this module is not installed: both names fail alike
        with pytest.raises(ImportError):
            importlib.import_module(old)
        pytest.skip(f"{new} needs {e.name}")
    assert importlib.import_module(old) is new_module
    assert sys.modules[old] is new_module
    assert new_module.__name__ == new and new_module.__spec__.name == new
    parent, _, leaf = old.rpartition(".")
    assert getattr(importlib.import_module(parent), leaf) is new_module


def test_fresh_interpreter_old_path_first() -> None:
    """The old path imported before the new one: one module, run once; attribute access, monkeypatch-style
    resolution and isinstance all see it; ``verl.utils.checkpoint.megatron_checkpoint_manager`` still says why it is
    absent; a moved name no module has is a plain ModuleNotFoundError."""
    code = """
import sys
import verl
moved = ("verl.api", "verl.checkpoint", "verl.data", "verl.rewards", "verl.reporting", "verl.sandbox", "verl.models",
         "verl.hardware", "verl.utils.tracking", "verl.utils.reward_score", "verl.utils.checkpoint")
assert not [m for m in sys.modules if m.startswith(moved)], [m for m in sys.modules if m.startswith(moved)]
import verl.utils.reward_score.gsm8k as old
import verl.rewards.gsm8k as new
assert old is new and sys.modules["verl.utils.reward_score"] is sys.modules["verl.rewards"]
import verl.utils
assert verl.utils.tracking is sys.modules["verl.reporting"]
from verl.utils.tracking.backends import FileBackend
from verl.reporting import backends
assert FileBackend is backends.FileBackend
from pkgutil import resolve_name
assert resolve_name("verl.utils.metric.reduce_metrics") is resolve_name("verl.reporting.metric.reduce_metrics")
from verl.utils import flops_counter
assert flops_counter is sys.modules["verl.hardware.flops_counter"]
try:
    import verl.utils.checkpoint.megatron_checkpoint_manager
except ModuleNotFoundError as e:
    assert "not provided by this verl" in str(e), e
else:
    raise AssertionError("megatron checkpoint manager must stay absent")
try:
    import verl.utils.tracking.no_such_module
except ModuleNotFoundError as e:
    assert e.name == "verl.utils.tracking.no_such_module", e
else:
    raise AssertionError("no such module")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_fresh_interpreter_relocated_paths_first() -> None:
    """verl's paths of the asynchronous trainers and of the worker sections, imported first in a fresh
    interpreter (nothing of verl.utils imported yet): the same modules and classes as their homes, and
    ``verl.workers.config`` re-exporting the same classes. (verl's ``python -m`` launch commands of the asynchronous
    trainers run in tests/docs/test_documented_commands.py.)"""
    code = """
import sys
import verl
assert "verl.sections" not in sys.modules and "verl.trainer" not in sys.modules
import verl.experimental.one_step_off_policy as old_package
from verl.workers.config.actor import ActorConfig
from verl.workers.config.optimizer import OptimConfig
import verl.sections.actor, verl.sections.optimizer, verl.workers.config
import verl.trainer.one_step_off_policy as new_package
assert old_package is new_package and verl.experimental.one_step_off_policy is new_package
assert ActorConfig is verl.sections.actor.ActorConfig is verl.workers.config.ActorConfig
assert OptimConfig is verl.sections.optimizer.OptimConfig is verl.workers.config.OptimConfig
assert verl.workers.config.actor is verl.sections.actor
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_monkeypatch_through_the_old_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import verl.reporting.values as values

    monkeypatch.setattr("verl.utils.tracking.values.fmt", lambda v: "patched")
    assert values.fmt(1.0) == "patched"


def test_a_pickle_naming_the_old_path_loads() -> None:
    import pickle

    import verl.reporting.values as values

    assert pickle.loads(b"cverl.utils.tracking.values\nfmt\n.") is values.fmt


def test_python_dash_m_runs_the_old_path() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "verl.utils.tracking.report", "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "usage" in out.stdout.lower(), out.stderr[-2000:]


def test_documented_alias_is_the_same_module() -> None:
    from verl.api import evaluation
    from verl.utils.evaluation import Evaluator

    assert sys.modules["verl.utils.evaluation"] is evaluation and Evaluator is evaluation.Evaluator


def test_new_name_matches_whole_parts() -> None:
    assert _moved.new_name("verl.utils.metric") == "verl.reporting.metric"
    assert _moved.new_name("verl.utils.metrics") is None
    assert _moved.new_name("verl.utils.dataset.arithmetic") == "verl.data.arithmetic_task"
    assert _moved.new_name("verl.utils.dataset.rl_dataset") == "verl.data.rl_dataset"
    assert _moved.new_name("verl.utils.fs") is None
