"""The layers hold: nothing under ``verl/workers`` (the engines and the workers that hold them) imports the agent
loop or anything else of ``verl.experimental``, nor the trainer above it (``verl.trainer``). The agent loop is a
layer over the engines' request servers (``verl.experimental.agent_loop.manager``), not a mode of the engine.

An AST scan of every module, imports inside function bodies and ``importlib.import_module("...")`` literals
included, so a lazy import cannot slip an arrow back up."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABOVE_THE_ENGINES = ("verl.trainer", "verl.api", "verl.experimental", "verl.serve")
ABOVE_THE_ROOMS = (*ABOVE_THE_ENGINES, "verl.workers", "verl.single_controller")
FORBIDDEN = {
    "verl/workers": ("verl.experimental", "verl.trainer", "verl.api", "verl.serve"),
    # the algorithms take the actor's typed section (verl.workers.config), nothing else above them
    "verl/algorithms": ABOVE_THE_ENGINES,
    "verl/utils": ABOVE_THE_ENGINES,
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


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_arrow_back_up(layer: str) -> None:
    files = sorted((ROOT / layer).rglob("*.py"))
    assert files, f"no modules under {layer}"
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if any(_is_under(module, prefix) for prefix in FORBIDDEN[layer])
    ]
    assert not bad, f"{layer} must not import {' or '.join(FORBIDDEN[layer])}:\n" + "\n".join(bad)


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
