"""Argument constraints: which calls of a tool a standing grant covers.

A constraint is a JSON object of argument paths (``"target.branch"`` for nested objects)
to tests, all of which must hold::

    {"currency": "EUR", "amount": {"le": 300}, "order_id": {"glob": "A*"}}

A plain value means equal; a one-entry object names an operator: ``eq``, ``ne``, ``gt``,
``ge``, ``lt``, ``le`` (numbers), ``in``, ``not_in`` (a list), ``glob`` (a string
pattern). A test on a missing argument, or on a value of another type, does not hold.
This is the language of the agents file's ``ask_if`` conditions; nothing is evaluated as
code. `normalize` turns a constraint into its stored form (every test as ``{op:
operand}``), `holds` checks a call's arguments against it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

Constraint = dict[str, dict[str, Any]]
"""A normalized constraint: argument path -> ``{operator: operand}``."""

OPERATORS: dict[str, str] = {
    "eq": "==",
    "ne": "!=",
    "gt": ">",
    "ge": ">=",
    "lt": "<",
    "le": "<=",
    "in": "in",
    "not_in": "not in",
    "glob": "matches",
}
"""The operators, and how `describe` writes them."""

NUMERIC = frozenset({"gt", "ge", "lt", "le"})
"""The operators that compare numbers."""
MAX_TESTS = 50


def is_number(value: Any) -> bool:
    """A number, and not a boolean."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    # True == 1 in Python; a constraint must not confuse them.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def normalize(raw: Any) -> Constraint:
    """The stored form of a constraint.

    Raises:
        ValueError: Not an object of paths to values or one-operator objects, an unknown
            operator, a non-number for ``gt``/``ge``/``lt``/``le``, a non-list for
            ``in``/``not_in``, a non-string for ``glob``.
    """
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError("an argument constraint is a non-empty object of argument names")
    if len(raw) > MAX_TESTS:
        raise ValueError(f"an argument constraint has at most {MAX_TESTS} entries")
    normalized: Constraint = {}
    for path, test in raw.items():
        if not isinstance(path, str) or not path or any(not part for part in path.split(".")):
            raise ValueError(f"{path!r} is not an argument name (use dots for nested ones)")
        if isinstance(test, Mapping) and len(test) == 1 and next(iter(test)) in OPERATORS:
            op, operand = next(iter(test.items()))
        elif isinstance(test, Mapping) and test:
            known = ", ".join(OPERATORS)
            raise ValueError(f"{path}: give one operator ({known}) or a plain value")
        else:
            op, operand = "eq", test
        if op in NUMERIC and not is_number(operand):
            raise ValueError(f"{path}: {op} needs a number, not {operand!r}")
        if op in ("in", "not_in") and not isinstance(operand, list):
            raise ValueError(f"{path}: {op} needs a list, not {operand!r}")
        if op == "glob" and not isinstance(operand, str):
            raise ValueError(f"{path}: glob needs a string pattern, not {operand!r}")
        normalized[path] = {op: operand}
    return normalized


def exactly(args: Mapping[str, Any]) -> Constraint:
    """A constraint every argument of a call must meet: each equal to its value here."""
    return {name: {"eq": value} for name, value in args.items()}


def lookup(args: Mapping[str, Any], path: Sequence[str]) -> tuple[bool, Any]:
    """Whether the argument at `path` (keys, outermost first) is there, and its value."""
    value: Any = args
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return False, None
        value = value[key]
    return True, value


def passes(op: str, value: Any, operand: Any) -> bool:
    """Whether `value` passes the test `op` (one of `OPERATORS`) with `operand`."""
    match op:
        case "eq":
            return _same(value, operand)
        case "ne":
            return not _same(value, operand)
        case "gt" | "ge" | "lt" | "le":
            if not is_number(value):
                return False
            return bool(
                {
                    "gt": value > operand,
                    "ge": value >= operand,
                    "lt": value < operand,
                    "le": value <= operand,
                }[op]
            )
        case "in":
            return any(_same(value, item) for item in operand)
        case "not_in":
            return not any(_same(value, item) for item in operand)
        case "glob":
            return isinstance(value, str) and fnmatch.fnmatchcase(value, operand)
        case _:  # normalize() admits only the operators above
            return False


def holds(constraint: Constraint | None, args: Mapping[str, Any]) -> bool:
    """Whether a call's arguments meet `constraint` (None: any arguments do)."""
    if constraint is None:
        return True
    for path, test in constraint.items():
        for op, operand in test.items():
            found, value = lookup(args, path.split("."))
            if not found or not passes(op, value, operand):
                return False
    return True


def argument_names(constraint: Constraint) -> set[str]:
    """The top-level arguments a constraint looks at."""
    return {path.split(".", 1)[0] for path in constraint}


def masked(constraint: Constraint | None, secret: frozenset[str]) -> Constraint | None:
    """`constraint` with the operands of secret arguments replaced by a mask."""
    if constraint is None or not secret:
        return constraint
    return {
        path: ({op: "••••••" for op in test} if path.split(".", 1)[0] in secret else dict(test))
        for path, test in constraint.items()
    }


def describe(constraint: Constraint | None) -> str:
    """E.g. ``amount <= 300, currency == 'EUR'``; ``any arguments`` for None."""
    if constraint is None:
        return "any arguments"
    return ", ".join(
        f"{path} {OPERATORS.get(op, op)} {operand!r}"
        for path, test in constraint.items()
        for op, operand in test.items()
    )
