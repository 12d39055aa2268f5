"""`signoff serve` under cProfile, for `bench/serve_load.py --profile DIR` (bench only).

Usage::

    python bench/profile_serve.py DIR        # then as `python -m bot serve`

Runs the ``signoff`` command's ``serve`` in this process with `cProfile` timing by
`time.process_time` (CPU, not wall clock). Each SIGUSR1 writes what was profiled since the
previous one to ``DIR/<n>.prof`` (n = 1, 2, ...) and starts afresh, so the load generator
can cut the profile at its phases; exit writes the rest to ``DIR/last.prof``. Only the
main thread is profiled: the SQLite writer's worker thread (commits of shared groups,
``BEGIN`` that waits for a lock) is not in it.
"""

from __future__ import annotations

import cProfile
import signal
import sys
import time
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    profile = cProfile.Profile(time.process_time)
    cuts = 0

    def cut(signum: int, frame: FrameType | None) -> None:
        nonlocal cuts
        profile.disable()
        cuts += 1
        profile.dump_stats(out / f"{cuts}.prof")
        profile.clear()
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
