"""The ``--where`` language of ``actorwire log show``: a small, safe expression over a record's fields.

Fields, constants, comparisons (``== != < <= > >= in``, chained), ``and``/``or``/``not``, unary
minus and ``+ - * / %``; nothing else (no calls, attributes, subscripts or names outside the
record).  A field the record does not have makes the expression false, as a type mismatch does.
Values built by ``*`` and ``+`` are bounded (``'a' * 3000000000`` is refused, not a MemoryError).
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from actorwire.messages import UsageError
from actorwire.transport.internal import NotFound

_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
        ast.NotIn: lambda a, b: a not in b}
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Mod: operator.mod}
_MISSING = object()
#: The longest string, bytes or list a ``--where`` expression may build (``'a' * 3000000000`` was a
#: MemoryError traceback).
_MAX_BUILT = 1 << 20


def _bounded(op: ast.operator, left: Any, right: Any) -> Any:
    if isinstance(op, (ast.Mult, ast.Add)):
        sizes = [len(v) if isinstance(v, (str, bytes, list, tuple)) else None for v in (left, right)]
        counts = [v for v in (left, right) if isinstance(v, int) and not isinstance(v, bool)]
        if isinstance(op, ast.Mult) and any(n is not None for n in sizes) and counts:
            size = max(n for n in sizes if n is not None) * max(0, counts[0])
        elif isinstance(op, ast.Add) and all(n is not None for n in sizes):
            size = sum(n for n in sizes if n is not None)
        else:
            size = 0
        if size > _MAX_BUILT:
            raise WhereError(f"--where: the expression builds a value of {size:,} items; at most {_MAX_BUILT:,}")
    return _BIN[type(op)](left, right)


class WhereError(UsageError, ValueError):
    """A ``--where`` expression uses something the language does not have."""


class Where:
    """A compiled ``--where`` expression; fields missing from a record make it false."""

    def __init__(self, text: str) -> None:
        try:
            self.tree = ast.parse(text, mode="eval").body
        except SyntaxError as exc:
            raise WhereError(f"--where: {exc.msg} in {text!r}") from None
        self._check(self.tree)
        self.text = text

    def _check(self, node: ast.AST) -> None:
        allowed = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare, ast.Name,
                   ast.Load, ast.Constant, ast.BinOp, ast.Tuple, ast.List, *_CMP, *_BIN)
        for sub in ast.walk(node):
            if not isinstance(sub, allowed):
                raise WhereError(f"--where: `{type(sub).__name__}` is not allowed (fields, constants, "
                                 f"comparisons, and/or/not, + - * / % only)")

    def __call__(self, fields: dict[str, Any]) -> bool:
        try:
            return bool(self._eval(self.tree, fields))
        except (TypeError, LookupError, ZeroDivisionError):
            return False

    def _eval(self, node: ast.AST, fields: dict[str, Any]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            value = fields.get(node.id, _MISSING)
            if value is _MISSING:
                raise NotFound(node.id)
            return value
        if isinstance(node, ast.BoolOp):
            values = (self._eval(v, fields) for v in node.values)
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, fields)
            return (not value) if isinstance(node.op, ast.Not) else -value
        if isinstance(node, ast.BinOp):
            return _bounded(node.op, self._eval(node.left, fields), self._eval(node.right, fields))
        if isinstance(node, (ast.Tuple, ast.List)):
            return [self._eval(e, fields) for e in node.elts]
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, fields)
            for op, comparator in zip(node.ops, node.comparators):
                right = self._eval(comparator, fields)
                if not _CMP[type(op)](left, right):
                    return False
                left = right
            return True
        raise WhereError(f"--where: unsupported `{type(node).__name__}`")
