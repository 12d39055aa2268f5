"""`signoff serve` under cProfile, for `bench/serve_load.py --profile DIR` (bench only).

Usage::

    python bench/profile_serve.py DIR        # then as `python -m bot serve`

Runs the ``signoff`` command's ``serve`` in this process with `cProfile` timing by
`time.process_time` (CPU, not wall clock). Each SIGUSR1 writes what was profiled since the
previous one to ``DIR/<n>.prof`` (n = 1, 2, ...) and starts afresh, so the load generator
can cut the profile at its phases; exit writes the rest to ``DIR/last.prof``. Only the
main thread is profiled: the SQLite writer's worker thread (commits of shared groups,
``BEGIN`` that waits for a lock) is not in it.

Beside each profile, ``DIR/<n>.tx.txt`` counts the store's transactions by the function
that opened them (the first one outside ``runtime/store``) and whether they wrote.
"""

from __future__ import annotations

import cProfile
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def count_transactions(counts: Counter[str]) -> None:
    """Count `SQLStore.transaction` calls by their opener (bench only)."""
    from runtime.store.sql import SQLStore

    original = SQLStore.transaction

    @asynccontextmanager
    async def counted(self: SQLStore) -> AsyncIterator[Any]:
        frame = sys._getframe(2)
        while frame.f_back is not None and (
            "/runtime/store/" in frame.f_code.co_filename
            or "contextlib" in frame.f_code.co_filename
        ):
            frame = frame.f_back
        where = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"
        async with original(self) as tx:
            yield tx
            wrote = tx.wrote
        counts[f"{where} {'write' if wrote else 'read'}"] += 1

    SQLStore.transaction = counted  # type: ignore[method-assign]


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    profile = cProfile.Profile(time.process_time)
    cuts = 0
    counts: Counter[str] = Counter()
    count_transactions(counts)

    def cut(signum: int, frame: FrameType | None) -> None:
        nonlocal cuts
        profile.disable()
        cuts += 1
        profile.dump_stats(out / f"{cuts}.prof")
        profile.clear()
        lines = [f"{n:8} {where}" for where, n in counts.most_common()]
        (out / f"{cuts}.tx.txt").write_text("\n".join(lines) + "\n")
        counts.clear()
        profile.enable()

    signal.signal(signal.SIGUSR1, cut)
    from bot.cli import run

    sys.argv = ["signoff", "serve"]
    profile.enable()
    try:
        code = run()
    finally:
        profile.disable()
        profile.dump_stats(out / "last.prof")
    sys.exit(code)


if __name__ == "__main__":
    main()
