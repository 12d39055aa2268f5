"""``signoff audit export`` and ``signoff prune`` as real subprocesses against a SQLite
file seeded through the store."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.cli._audit import CSV_COLUMNS, archive_name, parse_time, write_archive
from runtime import ManualClock
from runtime.domain.states import RunStatus, TicketStatus
from runtime.domain.tickets import Allow, ResumeTicket, ToolPermission
from runtime.services.audit import Retention
from runtime.store.records import CallRecord, EventRecord, OutboxRecord, RunRecord
from runtime.store.sql import SQLStore
from tests.e2e.test_cli import Env

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def run(run_id: str, status: RunStatus, updated: float, agent: str = "refunds") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        thread_id="th",
        agent=agent,
        agent_version="v1",
        status=status,
        input="go",
        requester="U1",
        created_at=at(0),
        updated_at=at(updated),
        messages=[{"role": "user", "content": "go"}],
    )


async def _seed(db: Path) -> None:
    store = SQLStore.sqlite(db)
    try:
        await store.migrate()
        async with store.transaction() as tx:
            await tx.insert_run(run("r_old", RunStatus.DONE, 1))
            await tx.insert_run(run("r_open", RunStatus.AWAITING, 1, agent="deploys"))
            await tx.insert_call(
                CallRecord(
                    call_id="c1",
                    run_id="r_old",
                    batch=1,
                    seq=0,
                    model_call_id="m1",
                    tool="refund",
                    args={"order": 7},
                    state="completed",  # type: ignore[arg-type]
                    replay_policy="manual",
                    execution_key="k1",
                    created_at=at(0),
                    updated_at=at(1),
                )
            )
            await tx.insert_ticket(
                ResumeTicket(
                    ticket_id="tk_old",
                    correlation="c",
                    run_id="r_old",
                    thread_id="th",
                    agent="refunds",
                    agent_version="v1",
                    catalog_fingerprint="fp",
                    target=ToolPermission(call_id="c1", tool="refund", args={"order": 7}),
                    requester="U1",
                    created_at=at(0),
                )
            )
            await tx.close_ticket(
                "tk_old", status=TicketStatus.DECIDED, at=at(0.5), decision=Allow(), decided_by="U2"
            )
            await tx.insert_ticket(
                ResumeTicket(
                    ticket_id="tk_open",
                    correlation="c",
                    run_id="r_open",
                    thread_id="th",
                    agent="deploys",
                    agent_version="v1",
                    catalog_fingerprint="fp",
                    target=ToolPermission(call_id="c2", tool="deploy", args={}),
                    requester="U1",
                    created_at=at(0),
                )
            )
            await tx.add_outbox(
                OutboxRecord(
                    outbox_id="ob1",
                    run_id="r_old",
                    kind="run_finished",
                    payload={"run_id": "r_old"},
                    destination={"platform": "console"},
                    created_at=at(1),
                    next_attempt_at=at(1),
                    state="delivered",
                )
            )
            for hour, (run_id, kind) in enumerate(
                [
                    ("r_old", "run_started"),
                    ("r_open", "run_started"),
                    ("r_old", "decision"),
                    ("r_old", "run_done"),
                ]
            ):
                await tx.append_event(
                    EventRecord(
                        run_id=run_id,
                        at=at(hour),
                        kind=kind,
                        data={"note": f'say "{kind}", ok'},
                        actor="U2" if kind == "decision" else None,
                    )
                )
    finally:
        await store.close()


@pytest.fixture
def env(tmp_path: Path) -> Env:
    seeded = Env(tmp_path)
    asyncio.run(_seed(seeded.db))
    return seeded


def counts(env: Env) -> dict[str, int]:
    async def read() -> dict[str, int]:
        store = SQLStore.sqlite(env.db)
        try:
            async with store.transaction() as tx:
                return {
                    run_id: len(await tx.events(run_id))
                    for run_id in ("r_old", "r_open")
                    if await tx.get_run(run_id) is not None
                }
        finally:
            await store.close()

    return asyncio.run(read())


def test_export_as_ndjson_and_csv_between_two_times(env: Env, tmp_path: Path) -> None:
    done = env.signoff("audit", "export", "--since", "2026-01-01T12:00:00Z")
    assert done.code == 0, done.err
    lines = [json.loads(line) for line in done.out.splitlines()]
    assert [(e["run_id"], e["agent"], e["kind"]) for e in lines] == [
        ("r_old", "refunds", "run_started"),
        ("r_open", "deploys", "run_started"),
        ("r_old", "refunds", "decision"),
        ("r_old", "refunds", "run_done"),
    ]
    assert [e["seq"] for e in lines] == sorted(e["seq"] for e in lines)

    out = tmp_path / "window.csv"
    done = env.signoff(
        "audit",
        "export",
        "--since",
        "2026-01-01T13:00:00+00:00",
        "--until",
        "2026-01-01T15:00:00",
        "--format",
        "csv",
        "--output",
        str(out),
    )
    assert done.code == 0, done.err
    assert "2 events written" in done.err
    rows = list(csv.reader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert (
        tuple(rows[0]) == CSV_COLUMNS == ("seq", "at", "run_id", "agent", "kind", "actor", "data")
    )
    assert [(r[2], r[3], r[4], r[5]) for r in rows[1:]] == [
        ("r_open", "deploys", "run_started", ""),
        ("r_old", "refunds", "decision", "U2"),
    ]
    assert json.loads(rows[2][6]) == {"note": 'say "decision", ok'}
    assert datetime.fromisoformat(rows[2][1]) == at(2)

    bad = env.signoff("audit", "export", "--since", "yesterday-ish")
    assert bad.code == 2 and "is not a time" in bad.err


def test_prune_archives_then_deletes_only_finished_runs_and_is_idempotent(
    env: Env, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    dry = env.signoff("prune", "--before", "2026-01-02", "--archive", str(archive), "--dry-run")
    assert dry.code == 0, dry.err
    assert "would prune r_old (1 runs, 7 rows)" in dry.out
    assert counts(env) == {"r_old": 3, "r_open": 1}
    assert not archive.exists()

    done = env.signoff("prune", "--before", "2026-01-02", "--archive", str(archive))
    assert done.code == 0, done.err
    assert "pruned r_old" in done.out and "r_open" not in done.out
    assert counts(env) == {"r_open": 1}
    lines = [json.loads(line) for line in (archive / "r_old.jsonl").read_text().splitlines()]
    assert lines[0] == {"archive": 1, "run_id": "r_old", "run_ids": ["r_old"]}
    assert [(line["table"], line["row"].get("kind")) for line in lines[1:]] == [
        ("runs", None),
        ("calls", None),
        ("tickets", None),
        ("events", "run_started"),
        ("events", "decision"),
        ("events", "run_done"),
        ("outbox", "run_finished"),
    ]
    assert lines[1]["row"]["messages"] == [{"role": "user", "content": "go"}]
    assert lines[2]["row"]["args"] == {"order": 7}
    assert [p.name for p in archive.iterdir()] == ["r_old.jsonl"]

    again = env.signoff("prune", "--before", "2026-01-02", "--archive", str(archive))
    assert again.code == 0, again.err
    assert "pruned 0 run trees" in again.err
    assert counts(env) == {"r_open": 1}


def test_a_crash_between_the_archive_and_the_delete_is_finished_by_the_next_prune(
    env: Env, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()

    async def archive_only() -> Path:
        store = SQLStore.sqlite(env.db)
        try:
            retention = Retention(store, ManualClock(at(100)))
            [found] = [a async for a in retention.candidates(at(24))]
            return write_archive(archive, found)  # and the process dies here
        finally:
            await store.close()

    first = asyncio.run(archive_only()).read_bytes()
    assert counts(env) == {"r_old": 3, "r_open": 1}  # both are there

    done = env.signoff("prune", "--before", "2026-01-02", "--archive", str(archive))
    assert done.code == 0, done.err
    assert counts(env) == {"r_open": 1}
    assert (archive / "r_old.jsonl").read_bytes() == first
    assert sorted(p.name for p in archive.iterdir()) == ["r_old.jsonl"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("2026-03-01", datetime(2026, 3, 1, tzinfo=UTC)),
        ("2026-03-01T08:00:00+01:00", datetime(2026, 3, 1, 7, tzinfo=UTC)),
        ("30d", at(0) - timedelta(days=30)),
        ("12h", at(-12)),
        ("90m", at(-1.5)),
    ],
)
def test_times_are_dates_times_or_time_ago(given: str, expected: datetime) -> None:
    assert parse_time(given, at(0)) == expected


def test_archive_names_are_safe_file_names() -> None:
    assert archive_name("run_8c1d") == "run_8c1d.jsonl"
    for odd in ("../etc/passwd", ".hidden", "a/b", "x" * 200):
        name = archive_name(odd)
        assert name.startswith("run-") and "/" not in name
