"""``signoff policy test``: replay recorded calls through a policy before deploying it."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from adapters.policies import ENGINES, FilePolicy, load_policy
from bot.cli._options import database_option, opened_runtime, run_coroutine
from bot.cli._output import clip, print_table
from runtime import ConfigurationError, Permission, Runtime
from runtime.domain.policies import PolicyOutcome, combine, failed_closed
from runtime.edges import PolicyError
from runtime.engine.policies import call_of

_AGO = re.compile(r"(\d+)([dhm])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def parse_since(value: str, now: datetime) -> datetime:
    """``7d``, ``12h``, ``30m`` before `now`, or an ISO 8601 date or time (UTC unless
    it names a zone).

    Raises:
        click.BadParameter: Neither.
    """
    ago = _AGO.fullmatch(value.strip())
    if ago is not None:
        return now - timedelta(**{_UNITS[ago.group(2)]: int(ago.group(1))})
    try:
        at = datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither a duration like 7d, 12h, 30m nor an ISO 8601 time"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Replayed:
    """One recorded call and what the new policy would make of it."""

    run_id: str
    call_id: str
    agent: str
    tool: str
    at: str
    was: Permission
    now: Permission
    outcome: PolicyOutcome

    @property
    def changed(self) -> bool:
        """Whether the new policy changes the call's permission."""
        return self.was is not self.now


async def replay(
    runtime: Runtime,
    policy: FilePolicy[Any],
    *,
    agent: str | None,
    since: datetime | None,
    limit: int,
) -> list[Replayed]:
    """The last `limit` recorded calls (``tool_proposed`` events), newest runs first,
    each run again through `policy` as its run and arguments were recorded.

    The recorded permission is what the call got then (its rule combined with the policy
    of the day, before any standing grant); the new one combines the call's own rule
    with `policy`'s answer.
    """
    found: list[Replayed] = []
    cursor: str | None = None
    while len(found) < limit:
        page = await runtime.run_page(limit=100, cursor=cursor)
        for listed in page.items:
            if since is not None and listed.created_at is not None and listed.created_at < since:
                return found
            if agent is not None and listed.agent != agent:
                continue
            found += await _replay_run(runtime, policy, listed.run_id, limit - len(found))
            if len(found) >= limit:
                return found
        cursor = page.next_cursor
        if cursor is None:
            break
    return found


async def _replay_run(
    runtime: Runtime, policy: FilePolicy[Any], run_id: str, room: int
) -> list[Replayed]:
    async with runtime.store.transaction() as tx:
        run = await tx.get_run(run_id)
        events = await tx.events(run_id)
    if run is None:
        return []
    replayed: list[Replayed] = []
    for event in events:
        if event.kind != "tool_proposed" or len(replayed) >= room:
            continue
        data = event.data
        was = Permission(str(data.get("permission")))
        ruled = Permission(str(data.get("ruled", data.get("permission"))))
        tool = str(data.get("tool"))
        recorded = data.get("args")
        args = dict(recorded) if isinstance(recorded, dict) else {}
        call = call_of((run.agent, run.agent_version), run, tool, args, event.at)
        try:
            outcome = PolicyOutcome(policy.id, policy.version, policy.evaluate_now(call))
        except PolicyError as exc:
            outcome = failed_closed(policy, str(exc))
        replayed.append(
            Replayed(
                run_id=run.run_id,
                call_id=str(data.get("call_id")),
                agent=run.agent,
                tool=tool,
                at=event.at.isoformat(),
                was=was,
                now=combine(ruled, outcome.answer),
                outcome=outcome,
            )
        )
    return replayed


@click.group()
def policy() -> None:
    """Try a policy on the calls the flight recorder holds.

    \b
    Examples:
      signoff policy test --policy prod.cedar --engine cedar --since 7d
      signoff policy test --policy guard.rego --engine rego --agent ops --fail-on-change
    """


@policy.command("test")
@click.option(
    "--policy",
    "path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The policy file to try.",
)
@click.option("--engine", required=True, type=click.Choice(ENGINES), help="Its engine.")
@click.option("--query", default=None, help="Rego only: the rule that answers.")
@click.option("--agent", default=None, help="Only calls of this agent.")
@click.option("--since", default=None, help="Only runs started since: 7d, 12h, 30m or ISO 8601.")
@click.option(
    "--limit",
    default=1000,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="At most N calls, newest runs first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print every replayed call as JSON.")
@click.option("--fail-on-change", is_flag=True, help="Exit 1 when any call would change.")
@database_option
def policy_test(
    path: Path,
    engine: str,
    query: str | None,
    agent: str | None,
    since: str | None,
    limit: int,
    as_json: bool,
    fail_on_change: bool,
    database_url: str | None,
) -> None:
    """Replay recorded calls through a policy and print what would have changed.

    Each recorded call (its run's requester, agent, source and the arguments as the
    flight recorder holds them, secret ones masked) is asked of the policy; its answer
    combines with the call's own rule, the stricter winning, and is compared with what
    the call got: allowed, asked or denied. Nothing is written.

    \b
    Examples:
      signoff policy test --policy prod.cedar --engine cedar --since 7d
      signoff policy test --policy guard.rego --engine rego --agent ops --fail-on-change
    """
    try:
        chosen = load_policy(
            "cedar" if engine == "cedar" else "rego", path, policy_id=path.stem, query=query
        )
    except PolicyError as exc:
        raise ConfigurationError(f"--policy {path}: {exc}") from None
    start = parse_since(since, datetime.now(UTC)) if since is not None else None

    async def body() -> list[Replayed]:
        async with opened_runtime(database_url) as runtime:
            return await replay(runtime, chosen, agent=agent, since=start, limit=limit)

    replayed = run_coroutine(body())
    changed = [r for r in replayed if r.changed]
    if as_json:
        for r in replayed:
            click.echo(
                json.dumps(
                    {
                        "run_id": r.run_id,
                        "call_id": r.call_id,
                        "agent": r.agent,
                        "tool": r.tool,
                        "at": r.at,
                        "was": r.was.value,
                        "now": r.now.value,
                        "changed": r.changed,
                        "policy": r.outcome.details(),
                    },
                    ensure_ascii=False,
                )
            )
    elif changed:
        print_table(
            ["RUN", "CALL", "AGENT", "TOOL", "WAS", "NOW", "WHY"],
            [
                [
                    r.run_id,
                    r.call_id,
                    clip(r.agent, 20),
                    clip(r.tool, 30),
                    _word(r.was),
                    _word(r.now),
                    clip(r.outcome.error or r.outcome.answer.reason or "-", 60),
                ]
                for r in changed
            ],
        )
    moves = Counter(f"{_word(r.was)} -> {_word(r.now)}" for r in changed)
    failed = sum(1 for r in replayed if r.outcome.error is not None)
    summary = (
        f"{len(replayed)} calls replayed through {chosen.id} ({chosen.version}): "
        f"{len(replayed) - len(changed)} unchanged, {len(changed)} changed"
    )
    if moves:
        summary += " (" + ", ".join(f"{m}: {n}" for m, n in sorted(moves.items())) + ")"
    if failed:
        summary += f"; the policy failed on {failed}"
    click.echo(summary, err=as_json)
    if fail_on_change and changed:
        raise click.exceptions.Exit(1)


def _word(permission: Permission) -> str:
    return {"allow": "allowed", "ask": "asked", "deny": "denied"}[permission.value]
