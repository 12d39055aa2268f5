"""Steering SQLite's query planner away from an index that looks right but is not.

SQLite plans without statistics (nobody runs ``ANALYZE`` on a signoff database), so for
``WHERE run_id = ? AND status = 'open' ORDER BY created_at`` it may walk the index on
``(status, created_at)`` (every open ticket of every run) instead of the one on
``(run_id, created_at)`` (the run's few tickets): the cost of each read then grows with
the number of parked runs. A unary ``+`` on a column is SQLite's documented way to keep
a term from choosing an index ("Disqualifying WHERE clause terms using unary-+"); other
databases get the column as it is (PostgreSQL plans from statistics).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement


class unindexed(FunctionElement[str]):
    """A text column that SQLite must not choose an index for in this term."""

    type = String()
    inherit_cache = True
    name = "unindexed"


@compiles(unindexed)
def _as_is(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


@compiles(unindexed, "sqlite")
def _unary_plus(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return "+" + compiler.process(element.clauses, **kw)
