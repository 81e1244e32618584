"""docs/porting_from_verl.md's map of verl's public Python surface is true: every ``same`` name imports and binds a
verl-style call the same way, every ``adapted`` name imports with exactly the signature the map gives, and every
``not provided`` name is really absent."""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "porting_from_verl.md"
MAP_HEADING = "## Map of verl's public Python surface"
STATUSES = ("same", "adapted", "not provided")


@dataclass(frozen=True)
class Row:
    section: str  # the module of the ### heading (first one when it names several)
    name: str
    verl: str
    here: str
    status: str
    line: int

    @property
    def target(self) -> str:
        return self.name if self.name.startswith("verl.") else f"{self.section}.{self.name}"


def _cell(text: str) -> str:
    return text.strip().strip("`").strip()


def parse_map(text: str) -> list[Row]:
    """The map's rows: tables under ``### `module` `` headings after the map heading, five columns each."""
    if MAP_HEADING not in text:
        raise AssertionError(f"{DOC} has no {MAP_HEADING!r} section")
    start = text.index(MAP_HEADING)
    offset = text[:start].count("\n")
    rows: list[Row] = []
    section = ""
    for i, line in enumerate(text[start:].splitlines(), start=offset + 1):
        if line.startswith("## ") and not line.startswith(MAP_HEADING):
            break
        heading = re.match(r"### `([\w.]+)`", line)
        if heading:
            section = heading.group(1)
            continue
        if not line.startswith("| `"):
            continue
        cells = [c for c in line.strip().strip("|").split("|")]
        if len(cells) != 5:
            raise AssertionError(f"{DOC}:{i}: expected 5 columns, got {len(cells)}: {line}")
        name, verl, here, status, _ = (_cell(c) for c in cells)
        if status not in STATUSES:
            raise AssertionError(f"{DOC}:{i}: status {status!r} is not one of {STATUSES}")
        rows.append(Row(section, name, verl, here, status, i))
    return rows


def params_of(signature: str) -> list[str] | None:
    """``"(a, b=, *args, **kw)"`` -> ``["a", "b=", "*args", "**kw"]``; ``"—"`` -> None (no signature)."""
    if signature in ("—", "-"):
        return None
    if not (signature.startswith("(") and signature.endswith(")")):
        raise AssertionError(f"bad signature cell {signature!r}")
    inner = signature[1:-1].strip()
    return [p.strip() for p in inner.split(",")] if inner else []


def resolve(target: str) -> Any:
    """Import the longest module prefix of ``target`` and walk the remaining attributes."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(target)


def actual_params(obj: Any) -> list[str]:
    """Our parameters in the map's notation (``self``/``cls`` dropped, ``=`` for defaults)."""
    fn = obj.__init__ if inspect.isclass(obj) else obj
    out = []
    for p in inspect.signature(fn).parameters.values():
        # _ray_trace_ctx: Ray adds it to the methods of a class once an actor of it was created in this process
        if p.name in ("self", "cls", "_ray_trace_ctx"):
            continue
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        out.append(prefix + p.name + ("=" if p.default is not p.empty else ""))
    return out


def _bare(params: list[str]) -> list[str]:
    return [p.rstrip("=") for p in params]


ROWS = parse_map(DOC.read_text())


def test_the_map_covers_the_surface_the_issue_names() -> None:
    sections = {r.section for r in ROWS}
    for module in (
        "verl.protocol",
        "verl.single_controller.base.decorator",
        "verl.trainer.ppo.core_algos",
        "verl.workers",
        "verl.utils",
        "verl.utils.tensordict_utils",
    ):
        assert module in sections, module
    names = {r.target for r in ROWS}
    for required in (
        "verl.protocol.DataProto.from_dict",
        "verl.utils.metric.reduce_metrics",
        "verl.workers.reward_manager.prime.PrimeRewardManager",
        "verl.trainer.ppo.ray_trainer.RayPPOTrainer",
        "verl.utils.dataset.rl_dataset.RLHFDataset",
        # v0.9 paths recipes and upstream's unit tests import
        "verl.trainer.ppo.rollout_corr_helper.compute_rollout_correction_and_rejection_mask",
        "verl.trainer.config.AlgoConfig",
        "verl.utils.checkpoint.checkpoint_manager.BaseCheckpointManager",
        "verl.utils.metric.Metric",
        "verl.utils.hdfs_io.copy",
    ):
        assert required in names, required
    assert len(names) == len(ROWS), "a name is listed twice"


@pytest.mark.parametrize("row", [r for r in ROWS if r.status == "same"], ids=lambda r: r.target)
def test_same_names_bind_a_verl_call_the_same_way(row: Row) -> None:
    obj = resolve(row.target)
    verl = params_of(row.verl)
    assert row.here == "", f"{DOC}:{row.line}: a 'same' row leaves the 'here' column empty"
    if verl is None:
        return
    ours = actual_params(obj)
    # verl's named parameters are our leading ones, in order; its *args / **kwargs must be accepted here too
    named = [p for p in verl if not p.startswith("*")]
    ours_named = [p for p in ours if not p.startswith("*")]
    n = len(named)
    assert _bare(ours_named[:n]) == _bare(named), f"{DOC}:{row.line}: {row.target}{tuple(ours)} vs verl's {row.verl}"
    for var in (p for p in verl if p.startswith("*")):
        stars = "**" if var.startswith("**") else "*"
        assert any(p.startswith(stars) and (stars == "**" or not p.startswith("**")) for p in ours), (
            f"{DOC}:{row.line}: {row.target} does not take {var}"
        )
    extra = [p for p in ours_named[n:] if not p.endswith("=")]
    assert not extra, f"{DOC}:{row.line}: {row.target} has required parameters verl lacks: {extra}"


@pytest.mark.parametrize("row", [r for r in ROWS if r.status == "adapted"], ids=lambda r: r.target)
def test_adapted_names_have_the_signature_the_map_gives(row: Row) -> None:
    obj = resolve(row.target)
    here = params_of(row.here)
    assert here is not None, f"{DOC}:{row.line}: an 'adapted' row gives this project's signature"
    assert actual_params(obj) == here, f"{DOC}:{row.line}: {row.target}{tuple(actual_params(obj))} vs map {here}"


@pytest.mark.parametrize("row", [r for r in ROWS if r.status == "not provided"], ids=lambda r: r.target)
def test_not_provided_names_are_absent(row: Row) -> None:
    with pytest.raises((ModuleNotFoundError, AttributeError)):
        resolve(row.target)


def test_absent_module_rows_are_the_modules_that_fail_with_a_message() -> None:
    """The table of upstream modules not provided lists exactly the names ``verl.absent_modules`` answers for."""
    from verl.absent_modules import ABSENT_MODULES

    rows = {r.target for r in ROWS if r.section == "verl.workers.megatron_workers"}
    assert rows == set(ABSENT_MODULES)
    for name in rows:
        with pytest.raises(ModuleNotFoundError, match=f"^{re.escape(name)} is not provided by this verl: "):
            importlib.import_module(name)


def test_parser_rejects_a_bad_status_and_reads_signatures() -> None:
    bad = f"{MAP_HEADING}\n\n### `verl.x`\n\n| `f` | `(a)` | | maybe | |\n"
    with pytest.raises(AssertionError, match="status 'maybe'"):
        parse_map(bad)
    assert params_of("(a, b=, *args, **kw)") == ["a", "b=", "*args", "**kw"] and params_of("—") is None
