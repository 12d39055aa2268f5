"""``signoff audit export`` and ``signoff prune``: the audit trail and retention."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import click

from bot.cli._options import database_option, opened_runtime, run_coroutine
from runtime.services.audit import AuditLog, Retention, RunArchive

CSV_COLUMNS = ("seq", "at", "run_id", "agent", "kind", "actor", "data")
"""The columns of ``signoff audit export --format csv``; ``data`` is JSON text."""
_RELATIVE = re.compile(r"^(\d{1,6})([dhm])$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,120}$")


def parse_time(text: str, now: datetime) -> datetime:
    """``2026-11-30``, ``2026-11-30T08:00:00+01:00`` (UTC when no offset), or ``30d``,
    ``12h``, ``90m`` (that long before `now`).

    Raises:
        click.BadParameter: None of those.
    """
    text = text.strip()
    relative = _RELATIVE.match(text)
    if relative is not None:
        amount, unit = relative.groups()
        return now - timedelta(**{_UNITS[unit]: int(amount)})
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time: use 2026-11-30, 2026-11-30T08:00:00Z or 30d, 12h, 90m"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@click.group()
def audit() -> None:
    """The audit trail: every run's events.

    \b
    Examples:
      signoff audit export --since 2026-11-01 --until 2026-12-01 --format csv --output nov.csv
      signoff audit export --since 7d
    """


@audit.command("export")
@click.option("--since", required=True, metavar="TIME", help="From this time (included).")
@click.option("--until", metavar="TIME", help="Up to this time (excluded; default: now).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["ndjson", "csv"]),
    default="ndjson",
    show_default=True,
    help="One JSON object per line, or CSV with the columns " + ", ".join(CSV_COLUMNS) + ".",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write to FILE instead of standard output.",
)
@database_option
def audit_export(
    since: str, until: str | None, fmt: str, output: Path | None, database_url: str | None
) -> None:
    """Export every run's events recorded between two times, in sequence order.

    TIME is a date (2026-11-30), a time (2026-11-30T08:00:00Z; UTC without an offset)
    or a time ago (30d, 12h, 90m). Secret arguments are masked as everywhere else.
    """

    async def go() -> int:
        async with opened_runtime(database_url) as runtime:
            now = runtime.clock.now()
            start = parse_time(since, now)
            end = parse_time(until, now) if until is not None else None
            count = 0
            with _opened(output) as out:
                writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
                if writer is not None:
                    writer.writerow(CSV_COLUMNS)
                async for event in AuditLog(runtime.store).export(start, end):
                    count += 1
                    if writer is None:
                        out.write(json.dumps(event, default=str, separators=(",", ":")) + "\n")
                    else:
                        writer.writerow(_csv_row(event))
            if output is not None:
                click.echo(f"{count} events written to {output}", err=True)
            return count

    run_coroutine(go())


def _csv_row(event: dict[str, Any]) -> list[str]:
    row = []
    for column in CSV_COLUMNS:
        value = event.get(column)
        if column == "data":
            row.append(json.dumps(value, default=str, separators=(",", ":")))
        else:
            row.append("" if value is None else str(value))
    return row


@contextmanager
def _opened(output: Path | None) -> Iterator[IO[str]]:
    if output is None:
        yield sys.stdout
        return
    with output.open("w", encoding="utf-8", newline="") as handle:
        yield handle


@click.command()
@click.option(
    "--before",
    required=True,
    metavar="TIME",
    help="Prune runs finished before this time (a date, a time, or 90d ago).",
)
@click.option(
    "--archive",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Write each pruned run tree to DIR/<run id>.jsonl first (fsynced before the "
    "delete). Without it the rows are deleted with no archive.",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be pruned.")
@database_option
def prune(before: str, archive: Path | None, dry_run: bool, database_url: str | None) -> None:
    """Archive, then delete, runs that finished before a time.

    A run goes with its sub-agent runs, tool calls, tickets, events, notifications and
    standing grants. Kept: a run not finished, or with a sub-agent run not finished or
    written since; one with an open ticket, a notification still to deliver or an
    active grant. Running it again finishes what an interrupted run left.

    \b
    Examples:
      signoff prune --before 90d --archive /var/backups/signoff --dry-run
      signoff prune --before 2026-06-01 --archive /var/backups/signoff
    """

    async def go() -> None:
        async with opened_runtime(database_url) as runtime:
            cut = parse_time(before, runtime.clock.now())
            retention = Retention(runtime.store, runtime.clock)
            pruned = kept = 0
            async for found in retention.candidates(cut):
                rows = len(found.lines) - 1
                if dry_run:
                    click.echo(
                        f"would prune {found.run_id} ({len(found.run_ids)} runs, {rows} rows)"
                    )
                    pruned += 1
                    continue
                where = ""
                if archive is not None:
                    path = await asyncio.to_thread(write_archive, archive, found)
                    where = f" -> {path}"
                if await retention.delete(found, cut):
                    pruned += 1
                    click.echo(
                        f"pruned {found.run_id} ({len(found.run_ids)} runs, {rows} rows){where}"
                    )
                else:
                    kept += 1
                    click.echo(f"kept {found.run_id}: it changed while being archived")
            verb = "would prune" if dry_run else "pruned"
            click.echo(
                f"{verb} {pruned} run trees finished before {cut.isoformat()}"
                + (f", kept {kept}" if kept else ""),
                err=True,
            )

    if archive is not None and not dry_run:
        archive.mkdir(parents=True, exist_ok=True)
    run_coroutine(go())


def archive_name(run_id: str) -> str:
    """The archive file of a run tree: ``<run id>.jsonl``, or a digest of an unusual id."""
    if _SAFE_NAME.match(run_id) and not run_id.startswith("."):
        return f"{run_id}.jsonl"
    return f"run-{hashlib.sha256(run_id.encode()).hexdigest()[:32]}.jsonl"


def write_archive(directory: Path, found: RunArchive) -> Path:
    """Write `found` to its file in `directory`, durably: a temporary file, fsynced,
    renamed over the final name, then the directory fsynced. Writing it again gives the
    same file."""
    path = directory / archive_name(found.run_id)
    temporary = directory / f".{path.name}.tmp"
    with temporary.open("w", encoding="utf-8") as handle:
        for line in found.lines:
            handle.write(json.dumps(line, default=str, separators=(",", ":")) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path
