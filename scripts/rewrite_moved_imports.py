"""Rewrite verl's ``verl.utils.<old>`` paths of the packages that left ``verl/utils`` to where they live now.

The map is :data:`verl.utils._moved.MOVED` (``verl.utils.tracking`` -> ``verl.reporting``, ...; the documented
``ALIASES`` such as ``verl.utils.evaluation`` stay). The old paths keep working (the same module objects), so this is
tidying, not a fix: run it after merging branches that still import the old paths, then ``ruff check --fix`` and
``ruff format`` (``--ruff`` does both on the files it changed).

What it rewrites, in .py/.md/.rst/.sh/.yaml/.yml/.toml/.txt files under the given paths:

- dotted names anywhere (imports, strings, docstrings, ``python -m ...``, logger names, ``monkeypatch`` targets):
  ``verl.utils.reward_score.gsm8k`` -> ``verl.rewards.gsm8k``, ``verl.utils.tracking.Tracking`` ->
  ``verl.reporting.Tracking``;
- file paths: ``verl/utils/tracking/plotting.py`` -> ``verl/reporting/plotting.py``, and the tests that followed
  their package: ``tests/utils/checkpoint/test_layout.py`` -> ``tests/checkpoint/test_layout.py``;
- not a name cited as verl's own (``Upstream: verl/utils/dataset/vision_utils.py``, ``verl's verl.utils.metric``);
- ``from verl.utils import flops_counter, fsdp_utils`` -> ``from verl.hardware import flops_counter`` and
  ``from verl.utils import fsdp_utils`` (single-line statements; a parenthesised one is reported, not changed).

A name is rewritten only when what it names exists at the new place (a module, a file, or a name a module defines),
so a citation of an upstream-only path (``verl/utils/dataset/multiturn_sft_dataset.py``) stays as written. Files
whose job is the old paths (the alias itself, its test, the upstream-surface and porting-map tests, the porting
guide, the absent-module table) are skipped.

    python scripts/rewrite_moved_imports.py            # rewrite in place, print what changed
    python scripts/rewrite_moved_imports.py --check    # print only; exit 1 when something would change
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = ["verl", "tests", "bench", "examples", "docs", "scripts", "recipe", "README.md"]
SUFFIXES = {".py", ".md", ".rst", ".sh", ".yaml", ".yml", ".toml", ".txt"}
# files that are about the old paths themselves (relative to the repository root)
SKIP = {
    "verl/utils/_moved.py",
    "verl/utils/__init__.py",
    "verl/absent_modules.py",
    "tests/utils/test_moved_modules.py",
    "tests/utils/test_verl_utils_surface.py",
    "tests/test_upstream_surface.py",
    "tests/test_porting_map.py",
    "docs/porting_from_verl.md",
    "docs/design.md",  # its table of rooms names verl's path of each
    "scripts/rewrite_moved_imports.py",
    "tests/scripts/test_rewrite_moved_imports.py",
}


def _load_moved():
    """``verl/utils/_moved.py`` loaded on its own (no ``import verl``: the script runs on any checkout)."""
    spec = importlib.util.spec_from_file_location("_verl_moved", REPO / "verl" / "utils" / "_moved.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_MOVED = _load_moved()


def _new_name(old: str) -> str | None:
    """Where ``old`` lives now, for the paths of :data:`MOVED` only (the documented ALIASES stay as written)."""
    if any(old == alias or old.startswith(alias + ".") for alias in _MOVED.ALIASES):
        return None
    return _MOVED.new_name(old)


_OLD_TOPS = sorted({old.split(".")[2] for old in _MOVED.MOVED}, key=len, reverse=True)
_DOTTED = re.compile(r"\bverl\.utils\.(?:" + "|".join(_OLD_TOPS) + r")\b(?:\.\w+)*")
_PATH = re.compile(r"\bverl/utils/(?:" + "|".join(_OLD_TOPS) + r")\b(?:/\w+)*(?:\.py\b|/)?")
# the tests followed their packages (tests/utils/<old>/... -> tests/<room>/...)
TEST_MOVED = {
    "tests/utils/checkpoint/test_fs.py": "tests/utils/test_fs.py",
    "tests/utils/checkpoint": "tests/checkpoint",
    "tests/utils/dataset": "tests/data",
    "tests/utils/reward_score": "tests/rewards",
    "tests/utils/tracking": "tests/reporting",
    "tests/utils/test_metric.py": "tests/reporting/test_metric.py",
    "tests/utils/sandbox": "tests/sandbox",
    "tests/utils/models": "tests/models",
    "tests/utils/hardware": "tests/hardware",
    "tests/utils/test_profiler.py": "tests/hardware/test_profiler.py",
}
_TEST_PATH = re.compile(
    r"\btests/utils/(?:checkpoint|dataset|reward_score|tracking|sandbox|models|hardware|test_metric\.py|test_profiler\.py)"
    r"\b(?:/\w+)*(?:\.py\b|/)?"
)
_FROM_UTILS = re.compile(
    r"^(?P<indent>[ \t]*)from verl\.utils import (?P<names>[^()\n#]+?)(?P<tail>[ \t]*(#.*)?)$", re.M
)


def _module_file(dotted: str) -> Path | None:
    """The source file of module ``dotted`` in this checkout, or None."""
    base = REPO.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def rewrite_dotted(token: str) -> str:
    """``token`` (``verl.utils.<old>[.sub...][.attr...]``) at its new path, or unchanged when the new one would not
    name anything that exists."""
    parts = token.split(".")
    for cut in range(len(parts), 2, -1):
        new = _new_name(".".join(parts[:cut]))
        if new is None:
            continue
        source = _module_file(new)
        if source is None:
            continue
        rest = parts[cut:]
        if rest and not re.search(rf"\b{re.escape(rest[0])}\b", source.read_text(encoding="utf-8")):
            return token  # not a name this module defines: an upstream-only submodule, say
        return ".".join([new, *rest])
    return token


def rewrite_path(token: str) -> str:
    """``verl/utils/<old>/...`` at its new path, or unchanged when nothing stands there."""
    trail = "/" if token.endswith("/") else ""
    body = token.rstrip("/")
    suffix = ".py" if body.endswith(".py") else ""
    dotted = body[: -len(suffix)] if suffix else body
    new = _new_name(dotted.replace("/", "."))
    if new is None:
        return token
    new_path = new.replace(".", "/") + suffix
    target = REPO / new_path
    if not (target.exists() or (not suffix and target.with_suffix(".py").is_file())):
        return token
    return new_path + trail


def rewrite_test_path(token: str) -> str:
    """``tests/utils/<old>/...`` where that test lives now, or unchanged when nothing stands there."""
    for old, new in sorted(TEST_MOVED.items(), key=lambda item: len(item[0]), reverse=True):
        if token == old or token.startswith(old.rstrip("/") + "/"):
            moved = new + token[len(old) :]
            return moved if (REPO / moved).exists() else token
    return token


def _rewrite_from_utils(match: re.Match[str], problems: list[str]) -> str:
    names = [n.strip() for n in match.group("names").split(",") if n.strip()]
    kept: list[str] = []
    lines: list[str] = []
    for item in names:
        name, _, alias = (p.strip() for p in item.partition(" as "))
        new = _new_name(f"verl.utils.{name}")
        if new is None or _module_file(new) is None:
            kept.append(item)
            continue
        package, _, leaf = new.rpartition(".")
        bound = alias or name
        lines.append(f"from {package} import {leaf}" + (f" as {bound}" if bound != leaf else ""))
    if not lines:
        return match.group(0)
    if kept:
        lines.append(f"from verl.utils import {', '.join(kept)}")
    indent = match.group("indent")
    lines[0] += match.group("tail")
    return "\n".join(indent + line for line in lines)


def rewrite_text(text: str, is_python: bool, problems: list[str]) -> str:
    """``text`` with every old path rewritten (see the module docstring)."""
    if is_python:
        text = _FROM_UTILS.sub(lambda m: _rewrite_from_utils(m, problems), text)
        for m in re.finditer(r"from verl\.utils import \(", text):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"line {line}: parenthesised 'from verl.utils import (...)': check it by hand")
    text = _DOTTED.sub(lambda m: m.group(0) if _cites_verl(m) else rewrite_dotted(m.group(0)), text)
    text = _PATH.sub(lambda m: m.group(0) if _cites_verl(m) else rewrite_path(m.group(0)), text)
    return _TEST_PATH.sub(lambda m: rewrite_test_path(m.group(0)), text)


def _cites_verl(match: re.Match[str]) -> bool:
    """Whether the name is cited as verl's (upstream's) own path ("Upstream: ``verl/utils/...``", "verl's
    ``verl.utils.metric``"): prose before it on its line says so, and the line is no import statement."""
    text = match.string
    line_start = text.rfind("\n", 0, match.start()) + 1
    before = text[line_start : match.start()]
    if re.match(r"\s*(from|import)\s", before):
        return False
    return re.search(r"upstream|verl's", before, re.I) is not None


def _files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        root = (REPO / p).resolve()
        if root.is_file():
            out.append(root)
        elif root.is_dir():
            out.extend(f for f in sorted(root.rglob("*")) if f.is_file() and f.suffix in SUFFIXES)
    return [f for f in out if "__pycache__" not in f.parts and f.relative_to(REPO).as_posix() not in SKIP]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=DEFAULT_PATHS, help="files or folders, relative to the repo")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if something would change")
    parser.add_argument("--ruff", action="store_true", help="then sort imports and format the changed .py files")
    args = parser.parse_args(argv)

    changed: list[Path] = []
    for path in _files(args.paths):
        text = path.read_text(encoding="utf-8")
        problems: list[str] = []
        new = rewrite_text(text, path.suffix == ".py", problems)
        rel = path.relative_to(REPO).as_posix()
        for problem in problems:
            print(f"{rel}: {problem}")
        if new == text:
            continue
        changed.append(path)
        count = sum(a != b for a, b in zip(text.splitlines(), new.splitlines())) or 1
        print(f"{rel}: {count} line(s)")
        if not args.check:
            path.write_text(new, encoding="utf-8")
    print(f"{len(changed)} file(s) {'would change' if args.check else 'changed'}")
    py = [str(p) for p in changed if p.suffix == ".py"]
    if args.ruff and py and not args.check:
        ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
        subprocess.run([ruff, "check", "--select", "I", "--fix", "--quiet", *py], check=False)
        subprocess.run([ruff, "format", "--quiet", *py], check=False)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
