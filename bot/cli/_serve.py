"""``signoff serve`` and ``signoff migrate``."""

from __future__ import annotations

import click

from bot import event_loop
from bot.cli._options import cli_state, database_option, run_coroutine
from bot.wiring import open_store
from runtime.store.sql import SchemaStatus


@click.command()
@database_option
@click.option(
    "--role",
    type=click.Choice(["all", "web", "worker"]),
    default=None,
    help="What this process runs (default: SIGNOFF_ROLE, else all): all; web (the HTTP "
    "edges and Slack Socket Mode, which store starts and decisions); worker (drives "
    "runs, delivers cards, expires tickets, holds the Discord gateway; serves only "
    "/healthz, /readyz and /metrics).",
)
def serve(database_url: str | None, role: str | None) -> None:
    """Serve signoff: web console, JSON API, webhooks and the run workers.

    One process runs the HTTP server (console at /, JSON API under /api, signed
    webhooks at /hooks/NAME, /healthz, /readyz, /metrics), the workers that drive
    ready runs, the outbox delivery loop and the deadline loop. Parked runs cost no
    memory: they wait in the database. SIGTERM or Ctrl-C stops taking work, lets
    running tools settle (SIGNOFF_SHUTDOWN_GRACE_SECONDS) and exits; a restart picks
    everything up again.

    Roles split that work over processes sharing one database. --role web serves the
    console, the JSON and approvals APIs, webhooks, Slack (HTTP or Socket Mode), the
    MCP gateway and Claude Code's routes: they store starts and decisions and drive
    nothing. --role worker drives the runs, applies received clicks, delivers the
    outbox, expires tickets, recovers runs whose worker died and holds the Discord
    gateway, and serves only /healthz, /readyz and /metrics on SIGNOFF_PORT. A commit
    of a web process wakes the workers at once on PostgreSQL; on SQLite (one machine)
    workers find it by polling (SIGNOFF_POLL_SECONDS). /readyz says the role. Without
    any worker nothing runs; an in-memory database cannot be shared (exit 3).

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
      signoff serve --role web       # the HTTP edges; scale with requests
      signoff serve --role worker    # drives the runs; scale with runs in flight
      SIGNOFF_ROLE=worker SIGNOFF_PORT=9090 signoff serve
    """
    from bot.logs import configure_logging
    from bot.serve import serve as serve_forever

    settings = cli_state().settings(database_url)
    if role is not None:
        settings = settings.model_copy(update={"role": role})
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
