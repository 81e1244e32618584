"""``verl.tools.function_tool``: registration and schema inference, the loader, return normalisation, and the
``FunctionTool`` as a ``BaseTool`` (the interface the agent loops call)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Literal

import pytest

from verl.tools import function_tool as mod
from verl.tools.base_tool import BaseTool
from verl.tools.function_tool import (
    FUNCTION_TOOL_REGISTRY,
    function_tool,
    get_function_tool,
    load_function_tools_from_path,
    normalize_function_tool_return,
)
from verl.tools.schemas import ToolResponse


@pytest.fixture(autouse=True)
def _clean_registry():
    FUNCTION_TOOL_REGISTRY.clear()
    mod._LOADED_FUNCTION_TOOL_PATHS.clear()
    yield
    FUNCTION_TOOL_REGISTRY.clear()
    mod._LOADED_FUNCTION_TOOL_PATHS.clear()


def test_schema_is_inferred_from_annotations_and_docstring() -> None:
    @function_tool
    def lookup(city: str, unit: Literal["c", "f"] = "c", scale: int | float = 1) -> str:
        """Look a city up.

        Args:
            city: the city.
            unit: the temperature unit.
            scale: a factor.
        """
        return city

    tool = get_function_tool("lookup")
    fn = tool.tool_schema.model_dump(exclude_none=True)["function"]
    assert fn["name"] == "lookup" and fn["description"] == "Look a city up."
    props = fn["parameters"]["properties"]
    assert props["city"] == {"type": "string", "description": "the city."}
    assert props["unit"]["enum"] == ["c", "f"] and props["scale"]["type"] == ["integer", "number"]
    assert fn["parameters"]["required"] == ["city"]
    assert isinstance(tool, BaseTool) and tool.name == "lookup" and lookup("x") == "x"  # the function is unchanged


def test_registration_errors() -> None:
    @function_tool("twice")
    def a(x: int) -> int:
        """A.

        Args:
            x: x.
        """
        return x

    with pytest.raises(ValueError, match="'twice' is already registered"):
        function_tool("twice")(a)
    with pytest.raises(ValueError, match=r"variadic parameter \*\*kw"):

        @function_tool
        def variadic(x: int, **kw: int) -> int:
            """V.

            Args:
                x: x.
            """
            return x

    with pytest.raises(Exception, match="no docstring"):
        function_tool("nodoc")(lambda x: x)
    schema = {"type": "function", "function": {"name": "other", "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(ValueError, match="schema names the function 'other'"):
        function_tool("mine", schema=schema)(lambda: "")
    with pytest.raises(KeyError, match="no function tool named 'missing'"):
        get_function_tool("missing")


def test_execute_runs_sync_in_a_thread_and_awaits_async() -> None:
    import threading

    seen = {}

    @function_tool("sync_echo")
    def sync_echo(text: str) -> tuple:
        """Echo.

        Args:
            text: text.
        """
        seen["thread"] = threading.current_thread() is not threading.main_thread()
        return text.upper(), 1, {"n": 1}

    @function_tool("async_echo")
    async def async_echo(text: str) -> str:
        """Echo.

        Args:
            text: text.
        """
        return text

    assert asyncio.run(get_function_tool("sync_echo").execute("id", {"text": "hi"})) == (
        ToolResponse(text="HI"),
        1.0,
        {"n": 1},
    )
    assert seen["thread"] is True
    tool = get_function_tool("async_echo")
    assert tool.is_async and asyncio.run(tool.execute("id", {"text": "ok"}))[0].text == "ok"


def test_loader_returns_what_the_file_registered_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "tools.py"
    path.write_text(
        "from verl.tools.function_tool import function_tool\n\n"
        "@function_tool('b')\ndef b(x: str) -> str:\n    '''B.\n\n    Args:\n        x: x.\n    '''\n    return x\n\n"
        "@function_tool('a')\ndef a(x: str) -> str:\n    '''A.\n\n    Args:\n        x: x.\n    '''\n    return x\n"
    )
    first = load_function_tools_from_path(str(path))
    assert [t.name for t in first] == ["b", "a"]
    assert load_function_tools_from_path(str(path)) == first  # not re-executed (no duplicate-name error)
    with pytest.raises(FileNotFoundError, match="function_tool_path does not exist"):
        load_function_tools_from_path(str(tmp_path / "nope.py"))
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with caplog.at_level(logging.WARNING):
        assert load_function_tools_from_path(str(empty)) == []
    assert "no @function_tool decorators found" in caplog.text


def test_return_values_are_normalised() -> None:
    class Obj:
        def __str__(self) -> str:
            return "OBJ"

    response = ToolResponse(text="r")
    assert normalize_function_tool_return(response) == (response, 0.0, {})
    assert normalize_function_tool_return({"a": 1}) == (ToolResponse(text='{"a": 1}'), 0.0, {})
    assert normalize_function_tool_return(Obj())[0].text == "OBJ"
    assert normalize_function_tool_return(("t", None, None)) == (ToolResponse(text="t"), 0.0, {})
    reward = normalize_function_tool_return(("t", 0))[1]
    assert reward == 0.0 and isinstance(reward, float)
    with pytest.raises(TypeError, match="length 1, 2, or 3"):
        normalize_function_tool_return(("a", 1, {}, "extra"))


def test_load_all_tools_merges_both_paths(tmp_path: Path) -> None:
    from verl.tools.function_tool import FunctionTool
    from verl.tools.tool_registry import load_all_tools

    yaml = tmp_path / "tools.yaml"
    yaml.write_text(
        "tools:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n    config:\n      type: native\n"
    )
    path = tmp_path / "fn.py"
    path.write_text(
        "from verl.tools.function_tool import function_tool\n\n"
        "@function_tool\ndef shout(x: str) -> str:\n    '''Shout.\n\n    Args:\n        x: x.\n    '''\n    return x\n"
    )
    assert load_all_tools(None, None) == []
    first = load_all_tools(str(yaml), str(path))
    assert [t.name for t in first] == ["calculator", "shout"] and isinstance(first[1], FunctionTool)
    assert load_all_tools(str(yaml), str(path))[1] is first[1]  # the function file is not executed again
    clash = tmp_path / "clash.py"
    clash.write_text(path.read_text().replace("def shout", "def calculator"))
    with pytest.raises(ValueError, match=r"tool name\(s\) \['calculator'\] collide, defined both"):
        load_all_tools(str(yaml), str(clash))
