"""Import discord.py once, with its one import-time warning silenced.

discord.py imports the standard library's ``audioop`` (voice support) which Python 3.11
and 3.12 deprecate with a `DeprecationWarning` at import time. signoff never uses voice;
silencing exactly that warning, for that one import, keeps ``-W error`` runs (the test
suite) working without hiding any other warning.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="'audioop' is deprecated", category=DeprecationWarning
    )
    import discord  # noqa: F401
