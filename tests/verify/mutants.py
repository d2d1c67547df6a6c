"""Simple mutants of HumanEval canonical solutions: one operator or constant changed."""

from __future__ import annotations

import ast

_SWAPS = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv,
    ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.And: ast.Or, ast.Or: ast.And,
}  # fmt: skip


class _FirstSwap(ast.NodeTransformer):
    def __init__(self) -> None:
        self.done = False

    def _swap(self, op: ast.AST) -> ast.AST:
        if not self.done and type(op) in _SWAPS:
            self.done = True
            return _SWAPS[type(op)]()
        return op

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        node.op = self._swap(node.op)
        return self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        node.op = self._swap(node.op)
        return self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        node.ops = [self._swap(op) for op in node.ops]
        return self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> ast.AST:
        if not self.done and node.value is not None:
            self.done = True
            node.value = ast.Constant(None)
        return node


def mutant(prompt: str, solution: str, entry_point: str) -> str:
    """The prompt's module with the solved function's first operator swapped (else its first return made None)."""
    tree = ast.parse(prompt + solution)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry_point)
    swapper = _FirstSwap()
    swapper.visit(fn)
    return ast.unparse(tree)


def stub(prompt: str) -> str:
    """The prompt's function with a body that returns None."""
    return prompt + "    return None\n"
