"""Plain-text output: one-line messages, times, tables, runs and flight-recorder events."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click

from runtime import PendingEntry, RunResult, RunStatus

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def one_line(text: str) -> str:
    return " ".join(_CONTROL.sub(" ", text).split())


def clip(text: str, width: int) -> str:
    clean = one_line(text)
    return clean if len(clean) <= width else clean[: max(width - 1, 0)] + "…"


def fail(label: str, message: str, code: int) -> int:
    click.echo(f"signoff: {label}: {one_line(message)}", err=True)
    return code


def format_time(value: datetime | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def format_until(deadline: datetime | None) -> str:
    if deadline is None:
        return "none"
    left = int((deadline - datetime.now(UTC)).total_seconds())
    if left <= 0:
        return f"{format_time(deadline)} (passed)"
    hours, rest = divmod(left, 3600)
    minutes = rest // 60
    span = f"{hours}h{minutes:02d}m" if hours else f"{max(minutes, 1)}m"
    return f"{format_time(deadline)} (in {span})"


def _shorten(value: Any, limit: int = 400) -> Any:
    """Long strings inside a JSON value cut to `limit` characters, for display."""
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"… (+{len(value) - limit} chars)"
    if isinstance(value, dict):
        return {k: _shorten(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, limit) for v in value]
    return value


def pretty(value: Any) -> str:
    # json.dumps escapes control characters, so model-made text cannot drive the terminal.
    return json.dumps(_shorten(value), indent=2, ensure_ascii=False, default=str)


def compact(value: Any) -> str:
    return json.dumps(_shorten(value, 120), ensure_ascii=False, default=str)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    for row in (headers, *rows):
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        click.echo("  ".join(cells).rstrip())


def _who(entry: PendingEntry) -> str:
    return f"{entry.ticket.who_may_decide()}; operators may too"


def print_pending(entry: PendingEntry, indent: str = "  ") -> None:
    label_width = 16

    def line(label: str, value: str) -> None:
        lines = value.splitlines() or [""]
        click.echo(f"{indent}{(label + ':').ljust(label_width)}{lines[0]}")
        for rest in lines[1:]:
            click.echo(f"{indent}{' ' * label_width}{rest}")

    line("Ticket", entry.ticket_id)
    line("Waiting for", entry.status)
    line("Agent", entry.ticket.agent)
    line("Tool", entry.call.name)
    line("Arguments", pretty(entry.call.arguments))
    if entry.status == "approval" and entry.prompt:
        line("Model's reason", one_line(entry.prompt))
    if entry.status == "input":
        line("Question", one_line(entry.prompt or ""))
        line("Answer schema", pretty(entry.schema or {}))
    if entry.status == "uncertain":
        line(
            "Uncertain",
            f"dispatched {entry.call.attempts} time(s), outcome never recorded",
        )
    line("Execution key", entry.execution_key)
    line("Requested by", entry.ticket.requester or "-")
    line("Who may decide", _who(entry))
    line("Deadline", format_until(entry.ticket.deadline))


def _next_step(entry: PendingEntry) -> str:
    match entry.status:
        case "approval":
            return (
                f"signoff approve {entry.ticket_id}  |  signoff deny {entry.ticket_id} --reason ..."
            )
        case "input":
            return f"signoff answer {entry.ticket_id} --data '{{...}}'"
        case _:
            return f"signoff resolve {entry.ticket_id} --result JSON | --retry | --abort"


def print_run(result: RunResult) -> None:
    run = result.run_id
    match result.status:
        case RunStatus.DONE:
            click.echo(f"run {run} is done: {one_line(result.text or '')}")
        case RunStatus.AWAITING:
            count = len(result.pending)
            click.echo(f"run {run} is awaiting {count} decision{'s' if count != 1 else ''}:")
            for entry in result.pending:
                click.echo("")
                print_pending(entry)
                click.echo(f"  {'Decide with:'.ljust(16)}{_next_step(entry)}")
        case RunStatus.QUEUED:
            click.echo(
                f"run {run} is ready to continue: `signoff resume {run}` (or a worker) runs it"
            )
        case RunStatus.RUNNING:
            click.echo(f"run {run} is running in another process")
        case RunStatus.PAUSED:
            click.echo(f"run {run} is paused: `signoff resume {run}` continues it")
        case RunStatus.FAILED:
            click.echo(f"run {run} failed: {one_line(result.error or 'unknown error')}")
        case RunStatus.CANCELLED:
            click.echo(f"run {run} is cancelled")


def _event_line(event: dict[str, Any]) -> str:
    data = event.get("data") or {}
    parts = [f"by={event['actor']}"] if event.get("actor") else []
    for key, value in data.items():
        if value is None or value == {} or value == [] or key == "actor":
            continue
        shown = value if isinstance(value, str) else compact(value)
        parts.append(f"{key}={clip(str(shown), 80)}")
    at = datetime.fromisoformat(event["at"]).astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]
    detail = clip(" ".join(parts), 150)
    return f"  {event['seq']:>3}  {at}  {event['kind']:<17} {detail}"


def print_events(events: Sequence[dict[str, Any]]) -> None:
    day = (
        datetime.fromisoformat(events[0]["at"]).astimezone(UTC).strftime("%Y-%m-%d")
        if events
        else "-"
    )
    click.echo(f"Flight recorder ({len(events)} events, times UTC on {day}):")
    for event in events:
        click.echo(_event_line(event).rstrip())
