"""``signoff serve`` and ``signoff migrate``."""

from __future__ import annotations

import click

from bot import event_loop
from bot.cli._options import cli_state, database_option, run_coroutine
from bot.wiring import open_store
from runtime.store.sql import SchemaStatus


@click.command()
@database_option
def serve(database_url: str | None) -> None:
    """Serve signoff: web console, JSON API, webhooks and the run workers.

    One process runs the HTTP server (console at /, JSON API under /api, signed
    webhooks at /hooks/NAME, /healthz, /readyz, /metrics), the workers that drive
    ready runs, the outbox delivery loop and the deadline loop. Parked runs cost no
    memory: they wait in the database. SIGTERM or Ctrl-C stops taking work, lets
    running tools settle (SIGNOFF_SHUTDOWN_GRACE_SECONDS) and exits; a restart picks
    everything up again.

    Without SIGNOFF_OPERATOR_TOKEN a sign-in token is made up and printed (SQLite
    only). On PostgreSQL any number of replicas may serve one database; each needs the
    same SIGNOFF_OPERATOR_TOKEN and SIGNOFF_COOKIE_SECRET (or their *_FILE variants).
    With SIGNOFF_MODEL (e.g. openai:gpt-4.1-mini) every agent runs on that model; a
    missing key (SIGNOFF_OPENAI_API_KEY, SIGNOFF_ANTHROPIC_API_KEY) stops the start with
    exit 3.

    \b
    Examples:
      signoff serve
      SIGNOFF_MODEL=anthropic:claude-sonnet-4-5 SIGNOFF_ANTHROPIC_API_KEY=sk-ant-... signoff serve
      SIGNOFF_PORT=0 SIGNOFF_OPERATOR_TOKEN=change-me-0123456789 signoff serve
      signoff --config /etc/signoff/signoff.toml serve
    """
    from bot.logs import configure_logging
    from bot.serve import serve as serve_forever

    settings = cli_state().settings(database_url)
    configure_logging(settings.log_level)
    event_loop.run(serve_forever(settings), settings.event_loop)


@click.command()
@database_option
def migrate(database_url: str | None) -> None:
    """Create or upgrade the database schema to the newest migration.

    Every command does this on its own before touching the database, unless
    SIGNOFF_AUTO_MIGRATE=false; run it explicitly to prepare a database ahead of a
    deploy (a Kubernetes Job, a compose one-shot). A schema that a newer version
    already migrated is left alone when it is backward-compatible with this one.

    \b
    Examples:
      signoff migrate
      signoff migrate --database-url sqlite+aiosqlite:////var/lib/signoff/signoff.db
    """
    settings = cli_state().settings(database_url)

    async def body() -> tuple[SchemaStatus, SchemaStatus]:
        store = open_store(settings)
        try:
            before = await store.schema_status()
            if before.state not in ("current", "newer_compatible"):
                await store.migrate()
            return before, await store.schema_status()
        finally:
            await store.close()

    before, after = run_coroutine(body())
    where = _redacted(settings.database_url)
    if before.state == "current":
        click.echo(f"{where} is already at the newest schema ({after.revision})")
    elif before.state == "newer_compatible":
        click.echo(f"{where}: {before.describe()}; nothing to do")
    else:
        click.echo(f"migrated {where} to the newest schema ({after.revision})")


def _redacted(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "the database"
