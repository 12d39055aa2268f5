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


_ENTRIES = {
    "webhook": ("adapters/webhook/routes.py", "_handle"),
    "decision": ("adapters/web/api.py", "decide"),
    "metrics": ("bot/health.py", "metrics_route"),
    "request": ("aiohttp/web_protocol.py", "_handle_request"),
    "received": ("aiohttp/web_protocol.py", "data_received"),
    "claim": ("runtime/driving.py", "_claim"),
    "drive": ("runtime/_engine.py", "drive"),
    "loop": ("runtime/worker.py", "_claim_some"),
    "outbox": ("runtime/outbox.py", "deliver_due"),
    "deadlines": ("runtime/expiry.py", "expire_overdue"),
}


def shares(path: Path) -> list[tuple[str, float]]:
    """Where a profile's CPU went, by the serve process's entry points (shares of all)."""
    import pstats

    stats = pstats.Stats(str(path))
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or 1.0
    cum = dict.fromkeys(_ENTRIES, 0.0)
    for (file, _line, fn), (_cc, _nc, _own, cumulative, _callers) in raw.items():
        for name, (suffix, function) in _ENTRIES.items():
            if fn == function and file.endswith(suffix):
                cum[name] += cumulative
    handlers = cum["webhook"] + cum["decision"] + cum["metrics"]
    parts = [
        ("HTTP: webhook handler (signature, idempotency read, start)", cum["webhook"]),
        ("HTTP: decision route (ticket read, decision, run read)", cum["decision"]),
        ("HTTP: /metrics (the load generator's polling)", cum["metrics"]),
        (
            "HTTP: aiohttp (parsing, routing, middlewares, responses)",
            cum["request"] - handlers + cum["received"],
        ),
        ("worker: claiming runs", cum["claim"]),
        ("worker: driving (model turns, tools, parking)", cum["drive"]),
        ("worker: its loop (received decisions, claimable runs)", cum["loop"]),
        ("outbox delivery", cum["outbox"]),
        ("deadline loop", cum["deadlines"]),
    ]
    parts.append(("event loop, sockets, the rest", total - sum(v for _, v in parts)))
    return [(name, value / total) for name, value in parts]


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
