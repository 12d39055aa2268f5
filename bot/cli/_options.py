"""What every command shares: the settings, the acting user, common options, the runtime."""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from bot.settings import Settings, load_settings
from runtime import Actor, Runtime


@dataclass
class State:
    """What the root command hands to its subcommands."""

    config: Path | None
    loaded: Settings | None = field(default=None, init=False)

    def settings(self, database_url: str | None = None) -> Settings:
        settings = load_settings(
            self.config,
            overrides={"database_url": database_url},
            override_names={"database_url": "--database-url"},
        )
        if self.loaded is None:
            from bot.logs import configure_logging

            configure_logging(settings.log_level, json_lines=False)
        self.loaded = settings
        return settings


def cli_state() -> State:
    state = click.get_current_context().find_object(State)
    assert state is not None
    return state


def login_name() -> str:
    try:
        return getpass.getuser() or "unknown"
    except Exception:  # no login name in some containers
        return "unknown"


def _actor_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("the user id cannot be empty")
    return value.strip() if value else value


_F = TypeVar("_F", bound=Callable[..., Any])


def database_option(fn: _F) -> _F:
    """``--database-url``: the store to work on (default: SIGNOFF_DATABASE_URL)."""
    return click.option(
        "--database-url",
        metavar="URL",
        help="Database to work on (default: SIGNOFF_DATABASE_URL, else "
        "sqlite+aiosqlite:///signoff.db in the working directory).",
    )(fn)


def actor_options(fn: _F) -> _F:
    """``--as USER`` and ``--operator/--no-operator``: who acts."""
    fn = click.option(
        "--operator/--no-operator",
        default=True,
        show_default=True,
        help="Act with operator authority (may decide any ticket, except where four-eyes "
        "forbids the requester). --no-operator checks the ticket's approvers as a chat "
        "click would.",
    )(fn)
    return click.option(
        "--as",
        "as_user",
        metavar="USER",
        callback=_actor_id,
        help="The acting user id, recorded in the flight recorder "
        "(default: operator:<your login name>).",
    )(fn)


def resume_option(fn: _F) -> _F:
    """``--resume/--no-resume``."""
    return click.option(
        "--resume/--no-resume",
        default=True,
        show_default=True,
        help="Continue the run in this process when this was its last open decision. "
        "--no-resume leaves it queued for `signoff resume` or a worker.",
    )(fn)


def grant_options(fn: _F) -> _F:
    """``--grant run|thread`` and ``--hours N``: a standing grant given with an allow."""
    fn = click.option(
        "--hours",
        type=float,
        metavar="N",
        help="How long the grant lasts (more than 0, at most 720; default: a thread grant "
        "8 hours, a run grant as long as the run).",
    )(fn)
    return click.option(
        "--grant",
        type=click.Choice(["run", "thread"]),
        help="Also allow the tool's later calls without asking: for the rest of this run, "
        "or in this thread (the requester's runs) for --hours, as far as the tool allows.",
    )(fn)


def actor_of(as_user: str | None, operator: bool) -> Actor:
    login = login_name()
    return Actor(id=as_user or f"operator:{login}", operator=operator, platform="cli", name=login)


@asynccontextmanager
async def opened_runtime(database_url: str | None) -> AsyncIterator[Runtime]:
    from bot.bootstrap import open_runtime  # the serving process's modules, when needed

    settings = cli_state().settings(database_url)
    async with open_runtime(settings) as runtime:
        yield runtime


def run_coroutine(coro: Any) -> Any:
    return asyncio.run(coro)
