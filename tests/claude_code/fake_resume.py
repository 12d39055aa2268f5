"""A stand-in for ``claude -p --resume <session id>`` in the resume tests: it records how
it was started (arguments, directory) in ``$RESUME_LOG``, waits while a ``hold`` file is
in its directory (so a test can kill signoff while a resume runs), then prints a result as
Claude Code's ``--output-format json`` does."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    session = sys.argv[-1]
    record = {"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid()}
    with Path(os.environ["RESUME_LOG"]).open("a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")
    hold = Path("hold")
    ends = time.monotonic() + 120
    while hold.exists() and time.monotonic() < ends:
        time.sleep(0.05)
    if Path("fail").exists():
        print("the session could not be resumed", file=sys.stderr)
        return 3
    print(json.dumps({"session_id": session, "stop_reason": "end_turn", "result": "resumed ok"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
