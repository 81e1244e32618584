"""``verl.utils.rollout_trace``: the tracing decorators verl's agent loops and tools are written with.

Upstream verl sends the calls a decorated method makes to a tracing backend (``actor_rollout_ref.rollout.trace
.backend``: weave, mlflow, trackio) and, without a backend, passes them straight through. This project has no
tracing backend (the config accepts only ``backend: null``; docs/agent_loop.md), so a tool or agent loop written
against upstream (verl-recipe's ReTool ``@rollout_trace_op async def execute``) runs here as upstream runs it with
tracing off: :func:`rollout_trace_op` calls the method unchanged and :func:`rollout_trace_attr` sets no attributes.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["rollout_trace_attr", "rollout_trace_op"]


def rollout_trace_op(func: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``func`` (a method, coroutine or plain) as a traced operation: with no tracing backend, the call itself."""
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_call(*args: Any, **kwargs: Any) -> Any:
            return await func(*args, **kwargs)

        return async_call

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return call


@contextlib.contextmanager
def rollout_trace_attr(
    sample_index: Any = None,
    step: Any = None,
    rollout_n: Any = None,
    name: str = "rollout_trace",
    validate: bool = False,
    trace: bool = True,
) -> Iterator[None]:
    """The attributes (sample, step, rollout index) traced operations inside the block are tagged with upstream;
    with no tracing backend there is nothing to tag."""
    yield
