"""scripts/upstream_config_copy.py: a copy of upstream's generated default config loads through our entry point."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import yaml

from verl.trainer.config.v09_inert_keys import inert_keys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
_spec = importlib.util.spec_from_file_location(
    "upstream_config_copy", os.path.join(ROOT, "scripts", "upstream_config_copy.py")
)
copy_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(copy_check)


def _git_repo(tmp_path, files: dict[str, str]) -> str:
    """A one-commit repository holding ``files``; its git directory."""
    repo = tmp_path / "upstream"
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    env = dict(
        os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"
    )
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    return str(repo / ".git")


def _generated(**extra) -> str:
    """A generated config of upstream's shape: every inert key at its default (copies as interpolations)."""
    tree: dict = {}
    flat = {k: (f"${{oc.select:{e.follows},null}}" if e.follows else e.default) for k, e in inert_keys().items()}
    for key, value in {**flat, **extra}.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return yaml.safe_dump(tree)


def test_a_copy_of_the_generated_config_loads_and_a_changed_key_is_named(tmp_path, capsys) -> None:
    repo = _git_repo(tmp_path, {copy_check.GENERATED: _generated()})
    assert copy_check.main([repo]) == 0
    assert "loads" in capsys.readouterr().out
    changed = _git_repo(tmp_path / "b", {copy_check.GENERATED: _generated(**{"transfer_queue.enable": True})})
    assert copy_check.main([changed]) == 1
    assert "transfer_queue.enable=True: the TransferQueue" in capsys.readouterr().out
