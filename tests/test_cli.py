"""The ``verl`` console script: help, version, config, and forwarding argv to each subcommand's main()."""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
import types
from importlib import resources
from pathlib import Path

import pytest
import yaml

from verl import cli
from verl.version import __version__


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("ppo", "sft", "dpo", "kto", "eval", "merge", "config", "version"):
        assert f"\n  {name} " in out


def test_no_arguments_prints_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: verl <command>" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out.strip() == f"verl {__version__}"


def test_unknown_command_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ppoo"]) == 2
    assert "unknown command 'ppoo'; did you mean 'ppo'?" in capsys.readouterr().err


def test_ppo_cfg_job_is_forwarded(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ppo", "--cfg", "job", "trainer.experiment_name=via_cli"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["trainer"]["experiment_name"] == "via_cli"


def test_ppo_bad_config_exit_code_is_forwarded(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ppo", "--cfg", "job", "actor_rollout_ref.rollout.name=sglang"]) == 2
    assert "SGLang is not an engine here; use vllm or hf" in capsys.readouterr().err


def _fake_module(monkeypatch: pytest.MonkeyPatch, name: str, **attrs: object) -> None:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


def test_subcommand_forwards_remaining_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_main(argv: list[str]) -> int:
        calls.append(argv)
        return 7

    _fake_module(monkeypatch, "fake_verl_dpo_main", main=fake_main)
    monkeypatch.setitem(cli.SUBCOMMANDS, "dpo", cli.Subcommand("fake_verl_dpo_main", "test"))
    assert cli.main(["dpo", "--cfg", "job", "+x.y=1", "data.a=b"]) == 7
    assert calls == [["--cfg", "job", "+x.y=1", "data.a=b"]]


def test_missing_module_gives_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(cli.SUBCOMMANDS, "sft", cli.Subcommand("verl.trainer.no_such_main_module", "test"))
    assert cli.main(["sft", "data.x=1"]) == 1
    err = capsys.readouterr().err
    assert "verl sft: verl.trainer.no_such_main_module is not available in this installation" in err


def test_module_without_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _fake_module(monkeypatch, "fake_verl_no_main")
    monkeypatch.setitem(cli.SUBCOMMANDS, "eval", cli.Subcommand("fake_verl_no_main", "test"))
    assert cli.main(["eval"]) == 1
    assert "fake_verl_no_main has no main(argv) entry point" in capsys.readouterr().err


def test_package_main_may_live_in_dunder_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "fake_verl_merger_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("def main(argv):\n    return len(argv)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.SUBCOMMANDS, "merge", cli.Subcommand("fake_verl_merger_pkg", "test"))
    assert cli.main(["merge", "--backend", "fsdp"]) == 2


def test_config_prints_the_packaged_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["config", "ppo"]) == 0
    expected = resources.files("verl.trainer.config").joinpath("ppo_trainer.yaml").read_text()
    assert capsys.readouterr().out.rstrip("\n") == expected.rstrip("\n")


def test_config_resolved_with_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["config", "ppo", "--resolved", "data.max_prompt_length=99"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["actor_rollout_ref"]["rollout"]["prompt_length"] == 99


def test_console_script_version() -> None:
    script = shutil.which("verl", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the verl console script is not installed in this environment")
    proc = subprocess.run([script, "version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"verl {__version__}"
