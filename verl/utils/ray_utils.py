"""``verl.utils.ray_utils``: the event-loop helper verl's reward functions import (verl-recipe's FAPO scorer)."""

from __future__ import annotations

import asyncio
import threading

__all__ = ["get_event_loop"]

_local = threading.local()


def get_event_loop() -> asyncio.AbstractEventLoop:
    """The event loop running in this thread; else this thread's own loop, created (and made current) the first time
    or after it was closed. Unlike ``asyncio.get_event_loop`` it never goes through the deprecated implicit-loop
    path of newer Pythons."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    loop = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        _local.loop = loop
    return loop
