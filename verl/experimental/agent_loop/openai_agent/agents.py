"""Running the user's agent for one trajectory: a Python callable or a command.

A callable (``agent.openai.agent``: ``package.module:function`` or ``path/to/file.py:function``) is called as
``run(task, base_url, api_key)``; ``async def`` or plain ``def`` both work. It runs on its own thread with its own
event loop, so an agent that blocks (the synchronous ``openai.OpenAI`` client, ``time.sleep``) never stalls the
endpoint or the other trajectories; on timeout its task is cancelled (a thread stuck in blocking code is left
behind as a daemon and its later requests are refused).

A command (``agent.openai.command``) runs through the shell in its own process group with ``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` and ``VERL_AGENT_TASK`` (the task as JSON) added to the environment; on timeout the group is
killed. A non-zero exit status is a failure; the last non-empty line of its standard output is its result (a number,
or JSON with a ``reward`` field, for ``agent.openai.reward: agent``).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["AgentFailure", "agent_source_problem", "load_agent", "reward_of", "run_callable", "run_command"]

_OUTPUT_LIMIT = 1 << 20


class AgentFailure(Exception):
    """The agent failed: ``reason`` is ``raised``, ``timeout``, ``exit_status`` or ``bad_result``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def agent_source_problem(spec: str) -> str | None:
    """Why the agent ``spec`` names cannot be found, without running any of its code: a ``file.py`` that does not
    exist, or a module that no package on ``sys.path`` provides (only its parent packages are imported). None when
    it is found; whether the function exists is known only once the module runs (:func:`load_agent`)."""
    where = f"actor_rollout_ref.rollout.agent.openai.agent={spec!r}"
    if ":" not in spec:
        return f"{where}: expected package.module:function or path/to/file.py:function"
    module_name = spec.rsplit(":", 1)[0]
    if module_name.endswith(".py"):
        if os.path.isfile(module_name):
            return None
        return f"{where}: no such file {os.path.abspath(module_name)!r} (a relative path is read from {os.getcwd()})"
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as e:  # a parent package is missing or fails to import
        return f"{where}: cannot import {module_name!r}: {e}"
    return None if found is not None else f"{where}: no module {module_name!r} on sys.path"


def load_agent(spec: str) -> Callable[..., Any]:
    """The function named by ``module:function`` or ``file.py:function``."""
    where = f"actor_rollout_ref.rollout.agent.openai.agent={spec!r}"
    if ":" not in spec:
        raise ValueError(f"{where}: expected package.module:function or path/to/file.py:function")
    module_name, name = spec.rsplit(":", 1)
    if module_name.endswith(".py"):
        if not os.path.isfile(module_name):
            raise ValueError(f"{where}: no such file {module_name!r}")
        mod_spec = importlib.util.spec_from_file_location(f"verl_user_agent_{abs(hash(module_name))}", module_name)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"{where}: cannot import {module_name!r}: {e}") from e
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{where}: {module_name!r} has no function {name!r}")
    return fn


async def run_callable(fn: Callable[..., Any], task: Any, base_url: str, api_key: str, timeout_s: float) -> Any:
    """``fn(task, base_url, api_key)`` on a thread of its own (see the module docstring); its return value.
    Raises :class:`AgentFailure` (``raised``: with the exception's type and message; ``timeout``)."""
    result: Future = Future()
    handle: dict[str, Any] = {}

    def main() -> None:
        async def call() -> Any:
            value = fn(task, base_url, api_key)
            return await value if asyncio.iscoroutine(value) else value

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # the thread's current loop, for agents that look it up
        handle["loop"] = loop
        try:
            job = handle["task"] = loop.create_task(call())
            result.set_result(loop.run_until_complete(job))
        except BaseException as e:  # noqa: BLE001  (handed to the trajectory)
            if not result.done():
                result.set_exception(e)
        finally:
            handle.pop("task", None)
            _shutdown(loop)

    threading.Thread(target=main, name="openai-agent", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.wrap_future(result), timeout_s)
    except asyncio.TimeoutError as e:
        loop, job = handle.get("loop"), handle.get("task")
        if loop is not None and job is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(job.cancel)
            except RuntimeError:  # closed meanwhile
                pass
        raise AgentFailure("timeout", f"no result after {timeout_s:g} s") from e
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001  (the agent's own error)
        raise AgentFailure("raised", f"{type(e).__name__}: {e}") from e


def _shutdown(loop: asyncio.AbstractEventLoop) -> None:
    """Close the agent's event loop as ``asyncio.run`` does: tasks still running are cancelled. (An ``AsyncOpenAI``
    client the agent did not close may log "Event loop is closed" when it is collected later: close it, e.g.
    ``async with AsyncOpenAI(...) as client``.)"""
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


async def run_command(command: str, task: Any, base_url: str, api_key: str, timeout_s: float) -> str:
    """Run ``command`` (see the module docstring); its standard output. Raises :class:`AgentFailure`
    (``exit_status`` with the tail of its standard error; ``timeout``)."""
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": api_key,
           "VERL_AGENT_TASK": json.dumps(task, ensure_ascii=False, default=str)}  # fmt: skip
    proc = await asyncio.create_subprocess_shell(
        command,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except (asyncio.TimeoutError, asyncio.CancelledError) as e:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        if isinstance(e, asyncio.CancelledError):
            raise
        raise AgentFailure("timeout", f"command killed after {timeout_s:g} s") from e
    if proc.returncode != 0:
        tail = err[-400:].decode(errors="replace").strip().replace("\n", " | ")
        raise AgentFailure("exit_status", f"command exited with status {proc.returncode}: {tail}")
    return out[-_OUTPUT_LIMIT:].decode(errors="replace")


def reward_of(value: Any, from_command: bool) -> float:
    """The reward in an agent's result: a number (a bool counts as 0/1), ``{"reward": x}``, or, from a command, the
    last non-empty line of its output holding either. Raises :class:`AgentFailure` (``bad_result``)."""
    if from_command:
        lines = [line for line in str(value).splitlines() if line.strip()]
        if not lines:
            raise AgentFailure("bad_result", "the command printed nothing; its last output line must be the reward")
        try:
            value = json.loads(lines[-1])
        except json.JSONDecodeError as e:
            raise AgentFailure("bad_result", f"last output line {lines[-1][:80]!r} is not a number or JSON") from e
    if isinstance(value, dict) and "reward" in value:
        value = value["reward"]
    if isinstance(value, (bool, int, float)) and not isinstance(value, complex):
        reward = float(value)
        if reward == reward and abs(reward) != float("inf"):
            return reward
    raise AgentFailure("bad_result", f"the agent returned {str(value)[:80]!r}, not a finite number (reward=agent)")
