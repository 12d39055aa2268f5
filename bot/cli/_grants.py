"""``signoff grants list`` and ``signoff grants revoke``: standing grants."""

from __future__ import annotations

import json
from typing import Any, assert_never

import click

from bot.cli._options import actor_of, actor_options, database_option, opened_runtime, run_coroutine
from bot.cli._output import clip, format_time, format_until, one_line, print_table
from runtime import Grant


def _grant_json(grant: Grant) -> dict[str, Any]:
    return {
        "grant_id": grant.grant_id,
        "state": grant.state,
        "agent": grant.agent,
        "tool": grant.tool,
        "scope": grant.scope,
        "covers": grant.covers,
        "args": grant.constraint,
        "run_id": grant.run_id,
        "thread_id": grant.thread_id,
        "requester": grant.requester,
        "granted_by": grant.granted_by,
        "platform": grant.platform,
        "ticket_id": grant.ticket_id,
        "created_at": grant.created_at.isoformat(),
        "expires_at": grant.expires_at.isoformat() if grant.expires_at else None,
        "revoked_at": grant.revoked_at.isoformat() if grant.revoked_at else None,
        "revoked_by": grant.revoked_by,
    }


def _grant_until(grant: Grant) -> str:
    match grant.state:
        case "revoked":
            return f"revoked {format_time(grant.revoked_at)} by {clip(grant.revoked_by or '?', 24)}"
        case "expired":
            return f"expired {format_time(grant.expires_at)}"
        case "ended":
            return "ended with its run"
        case "active":
            return format_until(grant.expires_at) if grant.expires_at else "with its run"
        case _:
            assert_never(grant.state)


@click.group()
def grants() -> None:
    """List and revoke standing grants.

    An approver gives a grant with an allow (a card's "Allow for the rest of this run"
    or "Allow in this thread…", the console, the API, `signoff approve --grant`); later
    calls of that tool then run without asking. Revoking one stops it at once, on every
    replica.

    \b
    Examples:
      signoff grants list
      signoff grants revoke gr_4b1e...
    """


@grants.command("list")
@click.option("--all", "show_all", is_flag=True, help="Also revoked and expired grants.")
@click.option("--run", "run_id", metavar="RUN", help="Only grants given in this run.")
@click.option("--thread", "thread_id", metavar="THREAD", help="Only grants given in this thread.")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(1, 10_000), help="At most N."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@actor_options
@database_option
def grants_list(
    show_all: bool,
    run_id: str | None,
    thread_id: str | None,
    limit: int,
    as_json: bool,
    as_user: str | None,
    operator: bool,
    database_url: str | None,
) -> None:
    """List standing grants, newest first: active ones unless --all.

    With --no-operator, only what --as USER may see: the grants they gave and those given
    in runs they requested.

    \b
    Examples:
      signoff grants list
      signoff grants list --all --run run_8c1d...
      signoff grants list --as U024BE7LH --no-operator --json
    """
    viewer = actor_of(as_user, operator)

    async def body() -> list[Grant]:
        async with opened_runtime(database_url) as runtime:
            found: list[Grant] = await runtime.grants(
                viewer=await runtime.identities.as_person(viewer),
                run_id=run_id,
                thread_id=thread_id,
                active=not show_all,
                limit=limit,
            )
            return found

    found: list[Grant] = run_coroutine(body())
    if as_json:
        click.echo(json.dumps([_grant_json(g) for g in found], indent=2, ensure_ascii=False))
        return
    if not found:
        click.echo("no grants" if show_all else "no active grants")
        return
    print_table(
        ["GRANT", "STATE", "AGENT", "COVERS", "GRANTED BY", "RUN", "UNTIL"],
        [
            [
                g.grant_id,
                g.state,
                clip(g.agent, 20),
                clip(g.covers, 60),
                clip(g.granted_by, 24),
                g.run_id,
                _grant_until(g),
            ]
            for g in found
        ],
    )


@grants.command("revoke")
@click.argument("grant_id")
@actor_options
@database_option
def grants_revoke(
    grant_id: str, as_user: str | None, operator: bool, database_url: str | None
) -> None:
    """Revoke a standing grant: from now on its tool asks again, on every replica.

    With --no-operator, --as USER must be whoever gave it or the requester of the run it
    was given in.

    \b
    Examples:
      signoff grants revoke gr_4b1e...
      signoff grants revoke gr_4b1e... --as U024BE7LH --no-operator
    """
    actor = actor_of(as_user, operator)

    async def body() -> Grant:
        async with opened_runtime(database_url) as runtime:
            person = await runtime.identities.as_person(actor)
            done: Grant = await runtime.revoke_grant(grant_id, actor=person)
            return done

    revoked: Grant = run_coroutine(body())
    click.echo(f"revoked {revoked.grant_id} ({one_line(revoked.covers)}) as {actor.id}")
