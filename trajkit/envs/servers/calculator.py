"""Calculator MCP server: arithmetic tools and an expression evaluator (no ``eval``)."""

from __future__ import annotations

import ast
import math
import operator
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from trajkit.envs.servers import READ_ONLY, number, serve

server = MCPServer(
    "calculator", version="1.0", instructions="Exact arithmetic. Results are numbers.", log_level="WARNING"
)

Num = Annotated[float, Field(description="A number.")]

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
_FUNCTIONS = {"sqrt": math.sqrt, "abs": abs, "round": round, "min": min, "max": max, "log": math.log, "exp": math.exp}
_CONSTANTS = {"pi": math.pi, "e": math.e}
MAX_EXPONENT = 1000


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent {right} is too large (limit {MAX_EXPONENT})")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_eval(a) for a in node.args))
    raise ToolError(f"unsupported expression element: {ast.dump(node)[:60]}")


def evaluate_expression(expression: str) -> int | float:
    """Evaluate arithmetic (+ - * / // % **, parentheses, sqrt/abs/round/min/max/log/exp, pi, e)."""
    if len(expression) > 500:
        raise ToolError("expression is longer than 500 characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as e:
        raise ToolError(f"not an arithmetic expression: {e.msg}") from None
    try:
        return number(_eval(tree))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (ArithmeticError, ValueError, TypeError) as e:
        raise ToolError(f"cannot evaluate: {e}") from None


@server.tool(annotations=READ_ONLY)
def add(a: Num, b: Num) -> int | float:
    """Add two numbers: a + b."""
    return number(a + b)


@server.tool(annotations=READ_ONLY)
def subtract(a: Num, b: Num) -> int | float:
    """Subtract b from a: a - b."""
    return number(a - b)


@server.tool(annotations=READ_ONLY)
def multiply(a: Num, b: Num) -> int | float:
    """Multiply two numbers: a * b."""
    return number(a * b)


@server.tool(annotations=READ_ONLY)
def divide(a: Num, b: Num) -> int | float:
    """Divide a by b: a / b. Fails when b is zero."""
    if b == 0:
        raise ToolError("division by zero")
    return number(a / b)


@server.tool(annotations=READ_ONLY)
def power(base: Num, exponent: Num) -> int | float:
    """Raise base to exponent: base ** exponent."""
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponent {exponent} is too large (limit {MAX_EXPONENT})")
    try:
        return number(base**exponent)
    except (ArithmeticError, ValueError) as e:
        raise ToolError(f"cannot compute power: {e}") from None


@server.tool(annotations=READ_ONLY)
def sqrt(x: Num) -> int | float:
    """Square root of a non-negative number."""
    if x < 0:
        raise ToolError("square root of a negative number")
    return number(math.sqrt(x))


@server.tool(annotations=READ_ONLY)
def evaluate(expression: Annotated[str, Field(description="e.g. '(3 + 4) * sqrt(16) / 2'")]) -> int | float:
    """Evaluate an arithmetic expression exactly as written."""
    return evaluate_expression(expression)


if __name__ == "__main__":
    serve(server)
