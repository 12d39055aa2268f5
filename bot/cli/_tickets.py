"""``signoff tickets``: the open tickets."""

from __future__ import annotations

import json

import click

from bot.cli._options import actor_of, actor_options, database_option, opened_runtime, run_coroutine
from bot.cli._output import clip, compact, format_time, print_table
from runtime import PendingEntry


@click.command(short_help="List open tickets.")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(1, 10_000), help="At most N."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@actor_options
@database_option
def tickets(
    limit: int, as_json: bool, as_user: str | None, operator: bool, database_url: str | None
) -> None:
    """List open tickets (pending approvals, input requests, uncertain calls), oldest first.

    Decide one with `signoff approve`, `deny`, `answer` or `resolve`, naming the ticket id
    or the call's execution key. With --no-operator, only those --as USER may decide.

    \b
    Examples:
      signoff tickets
      signoff tickets --json | jq '.[].ticket_id'
      signoff tickets --as U024BE7LH --no-operator
    """
    viewer = actor_of(as_user, operator)

    async def body() -> list[PendingEntry]:
        async with opened_runtime(database_url) as runtime:
            person = await runtime.identities.as_person(viewer)
            found: list[PendingEntry] = await runtime.open_tickets(limit=limit, viewer=person)
            return found

    entries: list[PendingEntry] = run_coroutine(body())
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "ticket_id": e.ticket_id,
                        "status": e.status,
                        "run_id": e.ticket.run_id,
                        "thread_id": e.ticket.thread_id,
                        "agent": e.ticket.agent,
                        "tool": e.call.name,
                        "arguments": e.call.arguments,
                        "execution_key": e.execution_key,
                        "prompt": e.prompt,
                        "schema": e.schema,
                        "editable": list(e.editable),
                        "requester": e.ticket.requester,
                        "who_may_decide": e.ticket.who_may_decide(),
                        "four_eyes": e.ticket.four_eyes,
                        "grants": list(e.grants),
                        "deadline": e.ticket.deadline.isoformat() if e.ticket.deadline else None,
                        "created_at": e.ticket.created_at.isoformat(),
                    }
                    for e in entries
                ],
                indent=2,
                ensure_ascii=False,
                default=str,
            )
        )
        return
    if not entries:
        click.echo("no open tickets")
        return
    print_table(
        ["TICKET", "WAITS FOR", "RUN", "AGENT", "TOOL", "ARGUMENTS", "WHO MAY DECIDE", "DEADLINE"],
        [
            [
                e.ticket_id,
                e.status,
                e.ticket.run_id,
                clip(e.ticket.agent, 20),
                clip(e.call.name, 24),
                clip(compact(e.call.arguments), 48),
                clip(e.ticket.who_may_decide(), 36),
                format_time(e.ticket.deadline) if e.ticket.deadline else "-",
            ]
            for e in entries
        ],
    )
