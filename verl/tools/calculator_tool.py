"""A calculator tool: evaluates an arithmetic expression by walking its syntax tree (never ``eval``).

Allowed: int/float literals, ``+ - * / // % **``, unary ``+ -``, parentheses, and the functions ``abs``,
``round``, ``min``, ``max``, ``sqrt``, ``floor``, ``ceil``, ``log``, ``exp``. Exponents and intermediate integers are
bounded so a call cannot hang the worker (``2 ** 10 ** 10`` is refused).
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from verl.tools.base_tool import BaseTool, ToolResult
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["CalculatorError", "CalculatorTool", "safe_eval"]

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "exp": math.exp,
}
MAX_EXPONENT = 1000
MAX_INT_DIGITS = 1000
MAX_EXPRESSION_CHARS = 1000


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be evaluated (the message is shown to the model)."""


def _check_size(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_DIGITS * 3.33:
        raise CalculatorError(f"result has more than {MAX_INT_DIGITS} digits")
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is larger than {MAX_EXPONENT}")
        try:
            return _check_size(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError as e:
            raise CalculatorError("division by zero") from e
        except OverflowError as e:
            raise CalculatorError(f"overflow: {e}") from e
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        if node.keywords:
            raise CalculatorError(f"{node.func.id}() takes no keyword arguments")
        try:
            return _check_size(_FUNCTIONS[node.func.id](*[_eval(a) for a in node.args]))
        except (TypeError, ValueError, OverflowError) as e:
            raise CalculatorError(f"{node.func.id}(): {e}") from e
    raise CalculatorError(f"unsupported element {ast.dump(node)[:80]!r}; use numbers, + - * / // % ** and functions")


def safe_eval(expression: str) -> int | float:
    """Evaluate an arithmetic ``expression``; raises :class:`CalculatorError` with a reason the model can read."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("expression must be a non-empty string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise CalculatorError(f"syntax error: {e.msg}") from e
    return _eval(tree)


class CalculatorTool(BaseTool):
    """``calculator(expression)``: the value of an arithmetic expression, or the reason it has none.

    Config: ``type: native`` only. Metrics of a call: ``{"ok": bool}``.
    """

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "calculator",
                    "description": "Evaluate an arithmetic expression, e.g. 1234 * 5678 or (3 + 4) ** 2.",
                    "parameters": {
                        "type": "object",
                        "properties": {"expression": {"type": "string", "description": "the expression"}},
                        "required": ["expression"],
                    },
                },
            }
        )

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ToolResult:
        try:
            value = safe_eval(parameters.get("expression"))
        except CalculatorError as e:
            return ToolResponse(text=f"Error: {e}"), 0.0, {"ok": False}
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
            value = int(value)
        return ToolResponse(text=str(value)), 0.0, {"ok": True}
