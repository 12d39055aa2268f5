"""Argument constraints: which calls of a tool a standing grant covers.

A constraint is a JSON object of argument paths (``"target.branch"`` for nested objects)
to tests, all of which must hold::

    {"currency": "EUR", "amount": {"le": 300}, "order_id": {"glob": "A*"}}

A plain value means equal; a one-entry object names an operator: ``eq``, ``ne``, ``gt``,
``ge``, ``lt``, ``le`` (numbers), ``in``, ``not_in`` (a list), ``glob`` (a string
pattern). A test on a missing argument, or on a value of another type, does not hold;
values are compared with their types, nested ones too (``true`` is not ``1``, ``{"a":
true}`` is not ``{"a": 1}``; ``2`` and ``2.0`` are one JSON number). This is the language
of the agents file's ``ask_if`` conditions; nothing is evaluated as code. `normalize`
turns a constraint into its stored form (every test as ``{op: operand}``), `holds`
checks a call's arguments against it.

`exactly` is the constraint of a grant for "the same arguments": every argument equal to
its value, and one more test no person writes, on the whole argument object (the empty
path, `WHOLE`): ``{"only": [names]}``, the call has no argument but these.
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

WHOLE = ""
"""The path of the call's whole argument object (only `exactly` tests it)."""
ONLY = "only"
"""The test on `WHOLE`: the call has no argument but the listed names."""


def is_number(value: Any) -> bool:
    """A number, and not a boolean."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    # True == 1 in Python, also inside lists and objects; a constraint must not confuse
    # them, so JSON values are compared kind by kind, all the way down.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_number(a) or is_number(b):
        return is_number(a) and is_number(b) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (
            isinstance(a, Mapping)
            and isinstance(b, Mapping)
            and a.keys() == b.keys()
            and all(_same(a[key], b[key]) for key in a)
        )
    if isinstance(a, list | tuple) or isinstance(b, list | tuple):
        return (
            isinstance(a, list | tuple)
            and isinstance(b, list | tuple)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
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
    """The constraint of exactly these arguments: each equal to its value here (nested
    values too, with their types), and no other argument."""
    pinned: Constraint = {name: {"eq": value} for name, value in args.items()}
    pinned[WHOLE] = {ONLY: sorted(args)}
    return pinned


def _parts(path: str) -> list[str]:
    return [] if path == WHOLE else path.split(".")


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
        case "only":  # written by exactly() alone, on the whole argument object
            return isinstance(value, Mapping) and set(value) == set(operand)
        case _:  # normalize() admits only the operators above
            return False


def holds(constraint: Constraint | None, args: Mapping[str, Any]) -> bool:
    """Whether a call's arguments meet `constraint` (None: any arguments do)."""
    if constraint is None:
        return True
    for path, test in constraint.items():
        for op, operand in test.items():
            found, value = lookup(args, _parts(path))
            if not found or not passes(op, value, operand):
                return False
    return True


def argument_names(constraint: Constraint) -> set[str]:
    """The top-level arguments a constraint looks at."""
    return {path.split(".", 1)[0] for path in constraint if path != WHOLE}


def masked(constraint: Constraint | None, secret: frozenset[str]) -> Constraint | None:
    """`constraint` with the operands of secret arguments replaced by a mask."""
    if constraint is None or not secret:
        return constraint
    return {
        path: ({op: "••••••" for op in test} if path.split(".", 1)[0] in secret else dict(test))
        for path, test in constraint.items()
    }


def describe(constraint: Constraint | None) -> str:
    """E.g. ``amount <= 300, currency == 'EUR'``; ``any arguments`` for None; the
    arguments of `exactly` end with ``no other arguments``."""
    if constraint is None:
        return "any arguments"
    return ", ".join(
        _describe_test(constraint, path, op, operand)
        for path, test in constraint.items()
        for op, operand in test.items()
    )


def _describe_test(constraint: Constraint, path: str, op: str, operand: Any) -> str:
    if path == WHOLE and op == ONLY and isinstance(operand, list):
        if not operand:
            return "no arguments"
        if set(operand) <= argument_names(constraint):
            return "no other arguments"
        return "no arguments but " + ", ".join(str(name) for name in operand)
    return f"{path} {OPERATORS.get(op, op)} {operand!r}"
