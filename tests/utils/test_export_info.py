"""Exports are called after their run, not ``hf_model``: the record beside the weights and the served name."""

from __future__ import annotations

import json
from pathlib import Path

from verl.serve.engine import _checkpoint_name
from verl.utils.export_info import EXPORT_INFO_FILE, export_name, write_export_info


def test_export_is_named_after_its_run(tmp_path: Path) -> None:
    export = tmp_path / "outputs" / "verl" / "demo-run" / "hf_model"
    export.mkdir(parents=True)
    assert export_name(str(export)) == "demo-run"  # no record: the run directory's name
    write_export_info(str(export), "demo", 12)
    assert json.loads((export / EXPORT_INFO_FILE).read_text())["step"] == 12
    assert export_name(str(export)) == "demo"
    assert export_name(str(export) + "/") == "demo"
    other = tmp_path / "my-model"
    other.mkdir()
    assert export_name(str(other)) == "my-model"  # a directory with a name of its own keeps it


def test_checkpoint_served_name() -> None:
    assert _checkpoint_name("outputs/verl/demo/global_step_12") == "demo-step12"
    assert _checkpoint_name("outputs/verl/demo/global_step_12/actor") == "demo-step12"


def test_verl_serve_calls_an_export_by_its_run(tiny_model_dir: str, tmp_path: Path) -> None:
    import shutil

    from verl.serve.engine import resolve_model_source

    export = tmp_path / "run-dir" / "hf_model"
    shutil.copytree(tiny_model_dir, export)
    assert resolve_model_source(str(export)).name == "run-dir"
    write_export_info(str(export), "demo", 12)
    assert resolve_model_source(str(export)).name == "demo"
    assert resolve_model_source(str(export), served_name="mine").name == "mine"  # the flag still wins
