"""``@function_tool`` tools in the agent loop: ``multi_turn.function_tool_path`` next to ``tool_config_path``
(the model calls a plain function; its return value becomes the tool message), and the name clash between both."""

from __future__ import annotations

import pytest

from verl.tools import function_tool as function_tool_mod

TOOLS = '''
from verl.tools.function_tool import function_tool


@function_tool("multiply")
def multiply(a: int, b: int) -> dict:
    """Multiply two integers.

    Args:
        a: first factor.
        b: second factor.
    """
    return {"product": a * b}
'''


@pytest.fixture(autouse=True)
def _clean_registry():
    function_tool_mod.FUNCTION_TOOL_REGISTRY.clear()
    function_tool_mod._LOADED_FUNCTION_TOOL_PATHS.clear()
    yield
    function_tool_mod.FUNCTION_TOOL_REGISTRY.clear()
    function_tool_mod._LOADED_FUNCTION_TOOL_PATHS.clear()


def test_function_tool_called_by_the_model(tok, kit, tmp_path) -> None:
    path = tmp_path / "my_tools.py"
    path.write_text(TOOLS)
    call = '<tool_call>{"name": "multiply", "arguments": {"a": 12, "b": 34}}</tool_call>'
    engine = kit.ScriptedEngine(tok, {"Q7": [call, "408"]})
    config = kit.rollout_config(function_tool_path=str(path), prompt_length=1024)
    out = kit.run(tok, engine, config, kit.prompt_batch(tok, ["Q7: 12*34?"]))
    n = int(out.batch["attention_mask"][0, -out.batch["responses"].shape[1] :].sum())
    ids, mask = out.batch["responses"][0, :n].tolist(), out.batch["response_mask"][0, :n].tolist()
    assert '{"product": 408}' in tok.decode([t for t, m in zip(ids, mask) if m == 0])
    prompt = tok.decode(out.batch["prompts"][0][out.batch["attention_mask"][0, :1024].bool()].tolist())
    assert '"name": "multiply"' in prompt and '"description": "Multiply two integers."' in prompt
    assert out.non_tensor_batch["agent_metrics"][0]["tool_calls"] == {"multiply": 1}


def test_a_name_in_both_tool_paths_is_refused(tok, kit, tmp_path) -> None:
    from verl.experimental.agent_loop.runner import AgentLoopRunner
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import RolloutConfig

    path = tmp_path / "calc.py"
    path.write_text(TOOLS.replace('"multiply"', '"calculator"'))
    yaml = tmp_path / "tools.yaml"
    yaml.write_text(
        "tools:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n    config:\n      type: native\n"
    )
    cfg = omega_conf_to_dataclass(
        kit.rollout_config(tool_config_path=str(yaml), function_tool_path=str(path)), RolloutConfig
    )
    with pytest.raises(ValueError, match="two agent tools are named 'calculator'"):
        AgentLoopRunner(cfg, tok, generate_batch=lambda b: b)
