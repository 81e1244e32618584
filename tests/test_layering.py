"""The layers hold: nothing under ``verl/workers`` (the engines and the workers that hold them) imports the agent
loop or anything else of ``verl.experimental``, nor the trainer above it (``verl.trainer``). The agent loop is a
layer over the engines' request servers (``verl.experimental.agent_loop.manager``), not a mode of the engine.

Below the workers, no arrow runs back up: the algorithms, the helpers of ``verl/utils`` and the rule and judge
rewards of ``verl/rewards`` import nothing of the workers, the single controller, the experimental layer, the
trainer, the API or the server (the typed sections they read live on the ground floor, ``verl/sections``, which
imports nothing but :mod:`verl.base_config`); ``verl/experimental`` (the agent loop) sits under the trainer and
imports none of it (the asynchronous trainers, which subclass the PPO driver, live in ``verl/trainer``).

An AST scan of every module, imports inside function bodies and ``importlib.import_module("...")`` literals
included, so a lazy import cannot slip an arrow back up. An import is judged by the name it is written with:
``verl.workers.config.actor`` runs ``verl/workers/__init__.py`` even though the module itself is
``verl.sections.actor``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABOVE_THE_ENGINES = ("verl.trainer", "verl.api", "verl.experimental", "verl.serve")
ABOVE_THE_ROOMS = (*ABOVE_THE_ENGINES, "verl.workers", "verl.single_controller")
FORBIDDEN = {
    "verl/workers": ("verl.experimental", "verl.trainer", "verl.api", "verl.serve"),
    # the agent loop is a layer under the trainer (the asynchronous trainers live in verl/trainer)
    "verl/experimental": ("verl.trainer", "verl.api", "verl.serve"),
    # the algorithms and the LLM judge take their typed sections from verl/sections, nothing of the workers
    "verl/algorithms": ABOVE_THE_ROOMS,
    "verl/rewards": ABOVE_THE_ROOMS,
    "verl/utils": ABOVE_THE_ROOMS,
    # the rooms split out of verl/utils stay below everything that uses them
    **{
        room: ABOVE_THE_ROOMS
        for room in (
            "verl/protocol",
            "verl/data",
            "verl/checkpoint",
            "verl/reporting",
            "verl/models",
            "verl/hardware",
            "verl/sandbox",
        )
    },
}
# the ground floor: what these may import at all (besides the standard library and third-party packages)
ONLY = {
    "verl/sections": ("verl.base_config", "verl.sections"),
    "verl/utils": ("verl.base_config", "verl.sections", "verl.utils"),
}
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, module_name: str | None = None) -> list[tuple[int, str]]:
    """``(line, dotted module)`` of every import in ``path`` (relative imports resolved against its package;
    ``module_name``: the module's dotted name, by default from its path under the repository)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = (module_name or _module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def _is_under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def arrows_back_up(layer: str, files: list[Path] | None = None) -> list[str]:
    """``path:line imports module`` for every import of a module under ``layer`` (a folder of :data:`FORBIDDEN`
    or :data:`ONLY`) that the layer may not take: one of its forbidden prefixes, or, for a ground-floor layer, any
    ``verl`` module outside its allowed prefixes. ``files``: the modules to scan (default: all under ``layer``)."""
    paths = sorted((ROOT / layer).rglob("*.py")) if files is None else files
    forbidden = FORBIDDEN.get(layer, ())
    allowed = ONLY.get(layer)
    bad = []
    for path in paths:
        name = _module_name(path) if path.is_relative_to(ROOT) else None
        for line, module in imported_modules(path, name or layer.replace("/", ".") + "." + path.stem):
            if any(_is_under(module, prefix) for prefix in forbidden) or (
                allowed is not None
                and _is_under(module, "verl")
                and not any(_is_under(module, prefix) for prefix in allowed)
            ):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                bad.append(f"{where}:{line} imports {module}")
    return bad


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_arrow_back_up(layer: str) -> None:
    assert sorted((ROOT / layer).rglob("*.py")), f"no modules under {layer}"
    bad = arrows_back_up(layer)
    assert not bad, f"{layer} must not import {' or '.join(FORBIDDEN[layer])}:\n" + "\n".join(bad)


@pytest.mark.parametrize("layer", sorted(ONLY))
def test_ground_floor_imports_only_what_lies_under_it(layer: str) -> None:
    assert sorted((ROOT / layer).rglob("*.py")), f"no modules under {layer}"
    bad = arrows_back_up(layer)
    assert not bad, f"{layer} may import only {', '.join(ONLY[layer])} of verl:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("layer", "line"),
    [
        ("verl/algorithms", "from verl.workers.config.actor import ActorConfig"),
        ("verl/algorithms", "from verl.workers.config import ActorConfig"),
        ("verl/utils", "from verl.workers.config.optimizer import OptimConfig"),
        ("verl/utils", "from verl.protocol import DataProto"),
        ("verl/rewards", "from verl.workers.rollout.hf_rollout import HFRollout"),
        ("verl/rewards", "from verl.api.data import encode_prompts"),
        ("verl/experimental", "from verl.trainer.ppo.ray_trainer import RayPPOTrainer"),
        ("verl/experimental", "from verl.trainer.fully_async_policy.rollouter import Rollouter"),
        ("verl/sections", "from verl.utils.optim import build_optimizer"),
    ],
)
def test_an_arrow_back_up_is_caught(tmp_path: Path, layer: str, line: str) -> None:
    """Each arrow that once ran back up (and the ground floor reaching up at all) fails the scan when it comes
    back, written at module level and inside a function alike."""
    probe = tmp_path / "probe.py"
    probe.write_text(f"{line}\n\n\ndef f():\n    {line}\n", encoding="utf-8")
    bad = arrows_back_up(layer, [probe])
    assert sorted({b.split(":")[1].split()[0] for b in bad}) == ["1", "5"], bad


def test_the_scan_sees_lazy_relative_and_dynamic_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import importlib\n"
        "def f():\n"
        "    from verl.experimental.agent_loop import runner\n"
        "    from ..trainer import ppo\n"
        "    return importlib.import_module('verl.experimental.agent_loop.manager')\n",
        encoding="utf-8",
    )
    modules = [m for _, m in imported_modules(probe, "verl.workers.probe")]
    assert "verl.experimental.agent_loop" in modules
    assert "verl.trainer" in modules and "verl.trainer.ppo" in modules
    assert "verl.experimental.agent_loop.manager" in modules


def test_no_module_over_max_lines() -> None:
    """One module, one job: a file past MAX_LINES is usually two (split it along a real seam)."""
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in sorted((ROOT / "verl").rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert not long, f"modules over {MAX_LINES} lines:\n" + "\n".join(long)
