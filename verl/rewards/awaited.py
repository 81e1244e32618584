"""Reward functions written as coroutines (``async def compute_score(...)``), called like plain ones.

Upstream verl v0.9's reward loop awaits a custom reward function that is a coroutine function (verl-recipe's FAPO and
GenRM scorers are: they call a judge server with aiohttp). The reward managers here call the scoring function
synchronously, in the trainer or in reward worker processes, so such a function is wrapped in :class:`AwaitedCall`,
which runs each call's coroutine to completion on an event loop of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["AwaitedCall", "awaited_if_coroutine"]


class AwaitedCall:
    """``AwaitedCall(fn)(*args, **kwargs)`` runs ``fn(*args, **kwargs)`` (a coroutine function) to completion and
    returns its result. It keeps ``fn``'s name and signature (``inspect.signature`` sees ``fn``'s parameters) and
    pickles when ``fn`` does, so it travels to reward worker processes like a plain function."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        coro = self.fn(*args, **kwargs)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # the usual case: no loop in this thread
            return asyncio.run(coro)
        # called from inside a running loop (an async caller that did not await): a thread with a loop of its own
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, coro).result()


def awaited_if_coroutine(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` itself, or :class:`AwaitedCall` around it when it is a coroutine function."""
    return AwaitedCall(fn) if inspect.iscoroutinefunction(fn) else fn
