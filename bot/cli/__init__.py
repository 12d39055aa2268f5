"""The ``signoff`` command line (also ``python -m bot``).

Every command builds what it needs from the settings (`bot.settings`) when it runs, and
every error the runtime raises on purpose becomes one line on stderr and a documented exit
code (`EXIT_CODES`), never a traceback.
"""

from __future__ import annotations

from bot.cli._agents import agents
from bot.cli._control import cancel, pause, recover, resume
from bot.cli._decide import answer, approve, batch, deny, resolve
from bot.cli._demo import demo
from bot.cli._exits import (
    EXIT_BAD_ANSWER,
    EXIT_CODES,
    EXIT_CONFIG,
    EXIT_EXPIRED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOT_AWAITING,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_STALE,
    EXIT_STORAGE,
    EXIT_UNAUTHORIZED,
    EXIT_USAGE,
)
from bot.cli._grants import grants, grants_list, grants_revoke
from bot.cli._main import cli, main, run
from bot.cli._options import actor_options, database_option, grant_options, resume_option
from bot.cli._runs import runs, runs_list, runs_show
from bot.cli._serve import migrate, serve
from bot.cli._tickets import tickets

__all__ = [
    "EXIT_BAD_ANSWER",
    "EXIT_CODES",
    "EXIT_CONFIG",
    "EXIT_EXPIRED",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_AWAITING",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_RUN_FAILED",
    "EXIT_STALE",
    "EXIT_STORAGE",
    "EXIT_UNAUTHORIZED",
    "EXIT_USAGE",
    "actor_options",
    "agents",
    "answer",
    "approve",
    "batch",
    "cancel",
    "cli",
    "database_option",
    "demo",
    "deny",
    "grant_options",
    "grants",
    "grants_list",
    "grants_revoke",
    "main",
    "migrate",
    "pause",
    "recover",
    "resolve",
    "resume",
    "resume_option",
    "run",
    "runs",
    "runs_list",
    "runs_show",
    "serve",
    "tickets",
]
