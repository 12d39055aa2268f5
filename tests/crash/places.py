"""Where a crash scenario keeps its database."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Place:
    """A scenario's database (a SQLite file path or a URL) and its scratch directory."""

    db: str
    tmp: Path
