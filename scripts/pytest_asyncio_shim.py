"""A pytest plugin for scripts/upstream_unit_tests.py: run ``@pytest.mark.asyncio`` coroutine tests.

Upstream verl's tests mark coroutine tests with ``@pytest.mark.asyncio`` (the pytest-asyncio plugin, which this
project does not depend on). When pytest-asyncio is not installed, this plugin registers the marker and runs each
such test in a fresh event loop (``asyncio.run``), which is pytest-asyncio's default per-test loop; with
pytest-asyncio installed it does nothing. Async fixtures are not supported (none of the listed tests use them).
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect

import pytest

ACTIVE = importlib.util.find_spec("pytest_asyncio") is None


def pytest_configure(config: pytest.Config) -> None:
    if ACTIVE:
        config.addinivalue_line("markers", "asyncio: run this coroutine test in a fresh event loop")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a marked coroutine test function to completion; other tests are left to pytest."""
    func = pyfuncitem.obj
    if not ACTIVE or pyfuncitem.get_closest_marker("asyncio") is None or not inspect.iscoroutinefunction(func):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(func(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True
