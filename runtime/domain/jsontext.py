"""Strict JSON text: the numbers an answer may hold are finite.

Python's `json` reads ``NaN``, ``Infinity`` and ``-Infinity`` (none of them JSON) and turns
an overflowing literal such as ``1e999`` into ``inf``. Such a value slips past every
numeric rule (``nan > 1000`` is false), so every edge reads people's JSON with
`loads_strict`, and the core refuses non-finite numbers that arrive by other paths
(`non_finite_path`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NoReturn


class NonFiniteNumber(ValueError):
    """A JSON text or value holds ``NaN``, ``Infinity`` or a number too large for a float."""


def _refuse_constant(name: str) -> NoReturn:
    raise NonFiniteNumber(f"{name} is not a JSON number (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteNumber(f"{text} is too large for a number")
    return value


def loads_strict(text: str | bytes) -> Any:
    """Parse JSON text, refusing non-finite numbers.

    Args:
        text: The JSON text (bytes are read as UTF-8).

    Returns:
        The parsed value.

    Raises:
        NonFiniteNumber: The text holds ``NaN``, ``Infinity``, ``-Infinity`` or a number
            that overflows a float (also a `ValueError`).
        ValueError: The text is not valid JSON (`json.JSONDecodeError`) or not UTF-8.
        RecursionError: The text is nested too deeply.
    """
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def non_finite_path(value: Any, path: str = "") -> str | None:
    """Where in `value` a non-finite float sits (``"amount"``, ``"items/0"``), or None.

    The root itself is named ``"(root)"``. Dicts and lists/tuples are searched; other
    values are left alone.
    """
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where or "(root)"
        if isinstance(item, Mapping):
            stack.extend((f"{where}/{key}" if where else str(key), v) for key, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}/{i}" if where else str(i), v) for i, v in enumerate(item))
    return None
