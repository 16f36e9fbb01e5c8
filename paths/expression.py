"""Filter expressions: a small, safe language over a tuple's named fields (never `eval`)."""

from __future__ import annotations

import ast
import difflib
import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


_INT64 = 1 << 63   # numbers are 64-bit, as the fields they are compared with: -2**63 to 2**64 - 1


class ExpressionError(ValueError):
    """The expression does not parse or uses something outside the language; says where."""


_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_ARITH = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.BitAnd: operator.and_,
}


class Expression:
    """A boolean expression over named fields, e.g. `op == 1 and t_end - t_start > 5000`.

    The language: field names, numbers, strings, bytes, True/False/None, arithmetic
    (+ - * / // %) on numbers (a string or bytes literal is only compared), bitwise and (&, to
    test flag bits), comparisons (== != < <= > >=, chained), `in` / `not in` a literal tuple or
    list, and `and`, `or`, `not`. Anything else is an ExpressionError at construction, naming the
    offending part and its column.

    `symbols` names the values of some fields: {field: {name: value}}. Where such a field is
    compared with a name, bare or quoted (`op == move`, `op == "move"`, `op in (move, observe)`),
    the name stands for its value; a name it does not know is an ExpressionError listing the
    known ones.

    `matches(row)` evaluates it on one tuple (fields by position); `mask(batch)` on a numpy
    structured array (fields by name), giving a boolean array. Either raises ExpressionError for
    values it cannot be computed on (a negative number added to an unsigned field, a field ordered
    against text).
    """

    def __init__(self, text: str, fields: Sequence[str], symbols: Mapping[str, Mapping[str, int]] | None = None):
        self.text = text
        self.fields = tuple(fields)
        self.symbols = dict(symbols or {})
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExpressionError(
                f"filter {text!r}: does not parse at column {exc.offset}: {exc.msg}; "
                f"write e.g. {self.fields[0] if self.fields else 'f0'} > 0, over fields {', '.join(self.fields)}"
            ) from None
        except RecursionError:
            raise self._too_deep() from None
        self._tree = tree.body
        for node in ast.walk(self._tree):
            if isinstance(node, ast.Compare):
                self._name_values(node)
        try:
            self._row = self._compile(self._tree, vector=False)
        except RecursionError:
            raise self._too_deep() from None
        self._vector = None

    def _too_deep(self) -> ExpressionError:
        return ExpressionError(f"filter {self.text[:60]!r}...: nested too deeply ({len(self.text)} characters); "
                               "write a shorter expression, e.g. `f0 in (1, 2, 3)` for a chain of `or`s")

    def matches(self, row) -> bool:
        try:
            return bool(self._row(row))
        except (ArithmeticError, TypeError, ValueError) as exc:
            raise self._not_computed(exc) from None

    def mask(self, batch: np.ndarray) -> np.ndarray:
        import numpy as np  # here, not at import: checking a pathmap's filters needs no numpy (nor a command's start)

        if self._vector is None:
            self._vector = self._compile(self._tree, vector=True)
        try:
            with np.errstate(all="ignore"):   # x % 0 is 0 and x / 0 inf, as numpy has it, without a warning
                result = self._vector(batch)
        except (ArithmeticError, TypeError, ValueError) as exc:
            raise self._not_computed(exc) from None
        return np.broadcast_to(np.asarray(result, dtype=bool), batch.shape)

    def _not_computed(self, exc: Exception) -> ExpressionError:
        return ExpressionError(f"filter {self.text!r}: cannot be computed on these values "
                               f"({type(exc).__name__}: {exc}); compare fields with numbers of their range")

    def __repr__(self):
        return f"Expression({self.text!r})"

    def _name_values(self, node: ast.Compare) -> None:
        """Replace, in place, the names compared with a field that has `symbols` by their values."""
        operands = [node.left, *node.comparators]
        for i in range(len(operands) - 1):
            for mine, other in ((i, i + 1), (i + 1, i)):
                field = operands[mine]
                if isinstance(field, ast.Name) and field.id in self.symbols:
                    operands[other] = self._value_of(operands[other], field.id)
        node.left, node.comparators = operands[0], operands[1:]

    def _value_of(self, node, field: str):
        if isinstance(node, (ast.Tuple, ast.List)):
            node.elts = [self._value_of(e, field) for e in node.elts]
            return node
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        elif isinstance(node, ast.Name) and node.id not in self.fields:
            name = node.id
        else:
            return node
        names = self.symbols[field]
        if name not in names:
            close = difflib.get_close_matches(name, list(names), n=1)
            raise ExpressionError(
                f"filter {self.text!r}: unknown {field} {name!r} at column {node.col_offset + 1}"
                f"{f' (did you mean {close[0]!r}?)' if close else ''}; {field} is one of {', '.join(names)}"
                f" (or its number)")
        return ast.copy_location(ast.Constant(names[name]), node)

    def _fail(self, node, what):
        raise ExpressionError(
            f"filter {self.text!r}: {what} at column {getattr(node, 'col_offset', 0) + 1}; "
            f"fields are {', '.join(self.fields)}"
        )

    def _compile(self, node, vector):
        if vector:   # a batch's mask: numpy (imported by `mask`)
            import numpy as np
        c = lambda n: self._compile(n, vector)  # noqa: E731
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, str, bytes, bool, type(None))):
                self._fail(node, f"constant {node.value!r} is not allowed")
            value = node.value
            if isinstance(value, int) and not -_INT64 <= value < 2 * _INT64:
                self._fail(node, f"{value} is past 64 bits; fields and numbers are 64-bit")
            return lambda r: value
        if isinstance(node, ast.Name):
            if node.id not in self.fields:
                self._fail(node, f"unknown field {node.id!r}")
            if vector:
                name = node.id
                return lambda r: r[name]
            return operator.itemgetter(self.fields.index(node.id))
        if isinstance(node, ast.BoolOp):
            parts = [c(v) for v in node.values]
            if isinstance(node.op, ast.And):
                if vector:
                    return lambda r: np.logical_and.reduce([p(r) for p in parts])
                return lambda r: all(p(r) for p in parts)
            if vector:
                return lambda r: np.logical_or.reduce([p(r) for p in parts])
            return lambda r: any(p(r) for p in parts)
        if isinstance(node, ast.UnaryOp):
            self._numbers(node, node.operand)
            inner = c(node.operand)
            if isinstance(node.op, ast.Not):
                return (lambda r: np.logical_not(inner(r))) if vector else (lambda r: not inner(r))
            if isinstance(node.op, ast.USub):
                return lambda r: -inner(r)
            if isinstance(node.op, ast.UAdd):
                return inner
            self._fail(node, "this unary operator is not allowed")
        if isinstance(node, ast.BinOp):
            fn = _ARITH.get(type(node.op))
            if fn is None:
                self._fail(node, "this operator is not allowed")
            self._numbers(node, node.left, node.right)
            left, right = c(node.left), c(node.right)
            return lambda r: fn(left(r), right(r))
        if isinstance(node, ast.Compare):
            return self._compare(node, vector)
        self._fail(node, f"{type(node).__name__.lower()} is not allowed")

    def _numbers(self, node, *operands) -> None:
        """Arithmetic takes numbers: a string or bytes literal is compared, never computed with
        (`"x" * 3_000_000_000` would build a 3 GB string at the first evaluation)."""
        for operand in operands:
            if isinstance(operand, ast.Constant) and isinstance(operand.value, (str, bytes)):
                self._fail(operand, f"arithmetic takes numbers, not {operand.value[:20]!r}; strings and bytes "
                                    "may only be compared")

    def _compare(self, node, vector):
        if vector:
            import numpy as np
        operands = [self._compile(node.left, vector)]
        tests = []
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (ast.Tuple, ast.List)) or not all(
                        isinstance(e, ast.Constant) for e in right.elts):
                    self._fail(right, "`in` takes a literal tuple or list")
                values = tuple(e.value for e in right.elts)
                negate = isinstance(op, ast.NotIn)
                if vector:
                    tests.append(lambda a, b, v=values, n=negate: np.isin(a, v, invert=n))
                else:
                    tests.append(lambda a, b, v=values, n=negate: (a in v) != n)
                operands.append(lambda r: None)
                continue
            fn = _COMPARE.get(type(op))
            if fn is None:
                self._fail(node, "this comparison is not allowed")
            tests.append(fn)
            operands.append(self._compile(right, vector))
        if len(tests) == 1:
            test, left, right = tests[0], operands[0], operands[1]
            return lambda r: test(left(r), right(r))

        def chained(r):
            values = [o(r) for o in operands]
            results = [t(values[i], values[i + 1]) for i, t in enumerate(tests)]
            return np.logical_and.reduce(results) if vector else all(results)

        return chained
