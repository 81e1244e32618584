"""A plain run does not import what only optional features need.

A GPU box without pydantic could not start any run: the config checks imported the tool stack (pydantic) through the
agent-loop package. pydantic is a declared dependency now, and a run without agent loops, tools or serving still
must not need it, so a broken or partial install fails only the feature that uses it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

_BLOCK = textwrap.dedent(
    """
    import importlib.abc, runpy, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in {BLOCKED}:
                raise ImportError("blocked for this test: " + name)

    sys.meta_path.insert(0, Block())
    """
)


def _run(code: str, blocked: set[str]) -> subprocess.CompletedProcess:
    script = _BLOCK.replace("{BLOCKED}", repr(blocked)) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_config_check_of_a_plain_run_needs_no_pydantic() -> None:
    out = _run(
        """
        from verl.trainer.main_ppo import main
        assert main(["--cfg", "job"]) == 0
        assert "pydantic" not in sys.modules
        """,
        {"pydantic"},
    )
    assert out.returncode == 0, out.stderr[-2000:]


def test_training_modules_of_a_plain_run_import_without_pydantic() -> None:
    out = _run(
        """
        import verl.trainer.ppo.runner, verl.trainer.ppo.ray_trainer, verl.workers.fsdp_workers
        import verl.workers.rollout.hf_rollout
        import verl.experimental.agent_loop as agent_loop  # the package itself is cheap; its parts load on use
        assert "pydantic" not in sys.modules
        """,
        {"pydantic"},
    )
    assert out.returncode == 0, out.stderr[-2000:]


def test_agent_loop_check_still_loads_the_loops_when_enabled() -> None:
    from verl.trainer.config import load_config
    from verl.trainer.config.validation import ConfigError

    try:
        load_config(
            [
                "actor_rollout_ref.rollout.multi_turn.enable=true",
                "data.return_raw_chat=true",
                "actor_rollout_ref.rollout.agent.default_agent_loop=no_such_loop",
            ]
        )
    except ConfigError as e:
        assert "no_such_loop" in str(e) and "tool_agent" in str(e)
    else:
        raise AssertionError("an unknown agent loop must be refused")
