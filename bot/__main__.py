"""``python -m bot ...`` is the same as the ``signoff`` command."""

from bot.cli import main

if __name__ == "__main__":
    main()
