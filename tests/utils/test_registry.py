"""The one registry helper (verl.utils.registry.Registry) and the registries built on it."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from verl.utils.registry import Registry, same_definition


def test_register_get_and_errors_name_both_or_list_known() -> None:
    reg: Registry = Registry("widget")

    @reg.decorator("a")
    def first() -> int:
        return 1

    assert reg.get("a") is first and "a" in reg and len(reg) == 1 and list(reg) == ["a"]
    reg.register("a", first)  # the same object again: a no-op

    def second() -> int:
        return 2

    with pytest.raises(ValueError, match=r"widget 'a' is already registered to .*first; .*second needs another name"):
        reg.register("a", second)
    with pytest.raises(ValueError, match=r"unknown widget 'b'; known: \['a'\]"):
        reg.get("b")


def test_replace_check_and_custom_errors() -> None:
    reg: Registry = Registry(
        "loss",
        replace=True,
        check=lambda name, obj: None if callable(obj) else (_ for _ in ()).throw(TypeError(f"{name}: not callable")),
        unknown_error=lambda name, known: KeyError(f"no {name}; have {known}"),
    )
    reg.register("x", len)
    reg.register("x", abs)  # replace=True: the newer wins
    assert reg.get("x") is abs
    with pytest.raises(TypeError, match="y: not callable"):
        reg.register("y", 3)
    with pytest.raises(KeyError, match=r"no z; have \['x'\]"):
        reg.get("z")


def test_store_callable_follows_a_rebound_dict() -> None:
    holder = {"d": {}}
    reg: Registry = Registry("thing", store=lambda: holder["d"])
    reg.register("a", 1)
    holder["d"] = {"b": 2}  # code rebinding the module global: the registry reads the new dict
    assert reg.names() == ["b"] and reg.get("b") == 2


def test_same_definition_accepts_a_re_executed_function() -> None:
    source = "def f(x):\n    return x\n"
    ns1: dict = {"__name__": "m"}
    ns2: dict = {"__name__": "m"}
    exec(compile(source, "m.py", "exec"), ns1)
    exec(compile(source, "m.py", "exec"), ns2)
    assert same_definition(ns1["f"], ns2["f"])
    exec(compile("\n" + source, "m.py", "exec"), ns2)  # another line: another definition
    assert not same_definition(ns1["f"], ns2["f"])


def test_builtin_modules_load_lazily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reg: Registry = Registry("engine", builtin_modules={"lazy": "verl_test_lazy_engine"})
    host = types.ModuleType("verl_test_lazy_host")
    host.REG = reg  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verl_test_lazy_host", host)
    (tmp_path / "verl_test_lazy_engine.py").write_text(
        "import verl_test_lazy_host\nverl_test_lazy_host.REG.register('lazy', 'the lazy engine')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.names() == ["lazy"] and "lazy" not in reg  # listed before its module is imported
    assert "verl_test_lazy_engine" not in sys.modules
    assert reg.get("lazy") == "the lazy engine"
    monkeypatch.delitem(sys.modules, "verl_test_lazy_engine")


def test_ported_registries_keep_their_public_behaviour() -> None:
    from verl.algorithms.registry import ADV_ESTIMATORS, POLICY_LOSSES, get_adv_estimator_fn, get_policy_loss_fn
    from verl.experimental.agent_loop.agent_loop import AGENT_LOOPS, available_agent_loops, get_agent_loop_class
    from verl.experimental.agent_loop.tool_parser import ToolParser
    from verl.tools.function_tool import FUNCTION_TOOLS
    from verl.workers.reward_manager.registry import REWARD_MANAGERS, get_reward_manager_cls
    from verl.workers.rollout.base import ROLLOUTS, available_rollouts, get_rollout_class

    for reg in (ADV_ESTIMATORS, POLICY_LOSSES, AGENT_LOOPS, ToolParser.formats, FUNCTION_TOOLS, REWARD_MANAGERS):
        assert isinstance(reg, Registry)
    assert get_adv_estimator_fn("grpo") is ADV_ESTIMATORS.get("grpo")
    assert get_policy_loss_fn("vanilla") is POLICY_LOSSES.get("vanilla")
    assert get_reward_manager_cls("naive").__name__ == "NaiveRewardManager"
    assert {"single_turn_agent", "tool_agent"} <= set(available_agent_loops())
    assert get_agent_loop_class("tool_agent").__name__ == "ToolAgentLoop"
    assert available_rollouts() == ROLLOUTS.names() and {"hf", "vllm"} <= set(available_rollouts())
    assert get_rollout_class("hf").__name__ == "HFRollout"
    with pytest.raises(TypeError, match="needs a BaseRollout subclass"):
        ROLLOUTS.register("not_an_engine", object)
