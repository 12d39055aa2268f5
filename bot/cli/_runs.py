"""``signoff runs list`` and ``signoff runs show``."""

from __future__ import annotations

import json
from typing import Any

import click

from bot.cli._options import actor_of, actor_options, database_option, opened_runtime, run_coroutine
from bot.cli._output import (
    clip,
    compact,
    format_time,
    one_line,
    print_events,
    print_run,
    print_table,
)
from runtime import RunResult, RunStatus, TicketStatus, usage_of_events


def _delegation_fields(result: RunResult) -> list[tuple[str, str]]:
    """`runs show` lines for a run's place in a delegation tree (none for a lone run)."""
    fields: list[tuple[str, str]] = []
    if result.parent_run_id is not None:
        chain = " > ".join(link.agent for link in result.chain)
        fields.append(("parent", f"{result.parent_run_id} (task {result.task_key}; {chain})"))
    if result.children:
        listed = ", ".join(
            f"{c.run_id} {c.agent} {c.task_key} {c.status.value if c.status else '?'}"
            for c in result.children
        )
        totals = result.children_totals
        fields.append(("sub-agents", listed))
        fields.append(
            (
                "sub-usage",
                f"{totals.turns} model calls, {totals.total_tokens} tokens in {totals.runs} runs"
                + ("; incomplete" if totals.usage_incomplete else ""),
            )
        )
    return fields


@click.group()
def runs() -> None:
    """List runs and show one in detail.

    \b
    Examples:
      signoff runs list --status awaiting
      signoff runs show run_8c1d... --events
    """


@runs.command("list")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in RunStatus]),
    help="Only runs in this status (repeat for several).",
)
@click.option(
    "--limit", default=20, show_default=True, type=click.IntRange(1, 10_000), help="At most N."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@actor_options
@database_option
def runs_list(
    statuses: tuple[str, ...],
    limit: int,
    as_json: bool,
    as_user: str | None,
    operator: bool,
    database_url: str | None,
) -> None:
    """List runs, newest first, with how many decisions each waits on.

    With --no-operator, only the runs --as USER may see: those they started, and those
    with a ticket they may decide or decided.

    \b
    Examples:
      signoff runs list
      signoff runs list --status awaiting --status paused --limit 50
      signoff runs list --as U024BE7LH --no-operator
    """
    viewer = actor_of(as_user, operator)

    async def body() -> list[dict[str, Any]]:
        async with opened_runtime(database_url) as runtime:
            rows = []
            wanted = [RunStatus(s) for s in statuses]
            person = await runtime.identities.as_person(viewer)
            visible = [
                r.run_id
                for r in await runtime.list_runs(statuses=wanted, limit=limit, viewer=person)
            ]
            async with runtime.store.transaction() as tx:
                for run_id in visible:
                    run = await tx.get_run(run_id)
                    if run is None:
                        continue
                    open_tickets = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
                    pending = sum(1 for t in open_tickets if t.call_id is not None)
                    rows.append(
                        {
                            "run_id": run.run_id,
                            "status": run.status.value,
                            "agent": run.agent,
                            "requester": run.requester,
                            "thread_id": run.thread_id,
                            "pending": pending,
                            "turns": run.turns,
                            "tokens": run.prompt_tokens + run.completion_tokens,
                            "created_at": run.created_at.isoformat(),
                            "updated_at": run.updated_at.isoformat(),
                            "input": run.input,
                            "text": run.final_text,
                            "error": run.error,
                        }
                    )
            return rows

    rows = run_coroutine(body())
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    if not rows:
        click.echo("no runs")
        return
    print_table(
        ["RUN", "STATUS", "AGENT", "REQUESTER", "PENDING", "TURNS", "UPDATED", "INPUT"],
        [
            [
                r["run_id"],
                r["status"],
                clip(r["agent"], 20),
                clip(r["requester"] or "-", 24),
                str(r["pending"]),
                str(r["turns"]),
                format_time(r["updated_at"]),
                clip(r["input"], 50),
            ]
            for r in rows
        ],
    )


@runs.command("show")
@click.argument("run_id")
@click.option("--events", "with_events", is_flag=True, help="Also print the flight recorder.")
@click.option(
    "--jsonl",
    is_flag=True,
    help="Print only the flight recorder, as JSON lines (secret arguments masked).",
)
@actor_options
@database_option
def runs_show(
    run_id: str,
    with_events: bool,
    jsonl: bool,
    as_user: str | None,
    operator: bool,
    database_url: str | None,
) -> None:
    """Show one run: status, answer, usage, its tool calls and what it waits on.

    With --no-operator, only a run --as USER may see (else it does not exist, exit 4).

    \b
    Examples:
      signoff runs show run_8c1d...
      signoff runs show run_8c1d... --events
      signoff runs show run_8c1d... --jsonl > run.jsonl
    """
    viewer = actor_of(as_user, operator)

    async def body() -> None:
        async with opened_runtime(database_url) as runtime:
            person = await runtime.identities.as_person(viewer)
            if jsonl:
                click.echo(await runtime.export_events(run_id, viewer=person), nl=False)
                return
            result = await runtime.get(run_id, viewer=person)
            async with runtime.store.transaction() as tx:
                record = await tx.get_run(run_id)
                calls = await tx.calls_for_run(run_id)
            events = await runtime.events(run_id, viewer=person)
            agent = runtime.agents.get(result.agent)
        assert record is not None
        fields = [
            ("run", result.run_id),
            ("status", result.status.value),
            ("agent", result.agent),
            ("thread", result.thread_id),
            ("requester", result.requester or "-"),
            ("started", format_time(record.created_at)),
            ("updated", format_time(record.updated_at)),
            ("input", one_line(record.input)),
        ]
        if result.text is not None:
            fields.append(("answer", one_line(result.text)))
        if result.error is not None:
            fields.append(("error", one_line(result.error)))
        usage = (
            f"{result.turns} model calls, {result.total_tokens} tokens "
            f"({result.prompt_tokens} prompt + {result.completion_tokens} completion)"
        )
        spent = usage_of_events(events)
        if spent.cached_tokens or spent.cache_write_tokens:
            usage += f", {spent.cached_tokens} cached"
            if spent.cache_write_tokens:
                usage += f", {spent.cache_write_tokens} written to the cache"
        if spent.cost is not None:
            usage += f"; cost {spent.cost:.6f}"
        if result.usage_incomplete:
            usage += "; incomplete: an interrupted model call may have been charged"
        fields.append(("usage", usage))
        fields.extend(_delegation_fields(result))
        for label, value in fields:
            click.echo(f"{label:<10} {value}")
        if calls:
            click.echo("\nTool calls:")
            rows = []
            for call in calls:
                args = call.args
                if agent is not None and call.tool in agent.tools:
                    args = agent.tools[call.tool].masked(args)
                outcome = call.result if call.result is not None else call.error
                rows.append(
                    [
                        f"{call.batch}.{call.seq + 1}",
                        call.tool,
                        call.state.value,
                        str(call.attempts),
                        call.execution_key,
                        clip(compact(args), 50),
                        clip(compact(outcome) if outcome is not None else "-", 50),
                    ]
                )
            print_table(
                ["#", "TOOL", "STATE", "TRIES", "EXECUTION KEY", "ARGUMENTS", "RESULT"], rows
            )
        if result.pending:
            click.echo("")
            print_run(result)
        if with_events:
            click.echo("")
            print_events(events)

    run_coroutine(body())
