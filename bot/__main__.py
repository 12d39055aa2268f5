"""``python -m bot ...`` is the same as the ``signoff`` command (its console script)."""

from __future__ import annotations

from bot import collector


def main() -> None:
    """Run the ``signoff`` command line.

    The cyclic garbage collector pauses while the command line's modules load: they make
    a few hundred thousand objects that live as long as the process, and collecting
    meanwhile only scans them again and again (a tenth of `signoff serve`'s start-up).
    They are then frozen out of later collections (`gc.freeze`), which would scan them
    for nothing too.
    """
    collector.loading()
    try:
        from bot.cli import main as command_line
    finally:
        collector.loaded()
    command_line()


if __name__ == "__main__":
    main()
