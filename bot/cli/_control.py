"""Run control: ``resume``, ``pause``, ``cancel`` and ``recover``."""

from __future__ import annotations

import click

from bot.cli._options import actor_of, actor_options, database_option, opened_runtime, run_coroutine
from bot.cli._output import print_run
from runtime import Actor, RunNotFound, RunResult, RunStatus, Runtime, Unauthorized
from runtime.domain import visibility


async def _controlled(
    runtime: Runtime, run_or_thread: str, actor: Actor, action: str, *, threads: bool = False
) -> str:
    """The id of the run `actor` asks to pause, cancel or resume (with `threads`, a thread
    id stands for its latest run the actor may see), once `visibility.may_control` lets
    them.

    Raises:
        RunNotFound: No such run or thread, or the actor may not see it.
        Unauthorized: The actor sees the run but neither is an operator nor started it.
    """
    try:
        current = await runtime.get(run_or_thread, viewer=actor)
    except RunNotFound:
        if not threads:
            raise
        latest = await runtime.list_runs(thread_id=run_or_thread, limit=1, viewer=actor)
        if not latest:
            raise RunNotFound(f"no run or thread {run_or_thread!r}") from None
        current = latest[0]
    if not visibility.may_control(actor, current.requester):
        raise Unauthorized(
            f"only an operator or the requester ({current.requester or 'nobody'}) may "
            f"{action} run {current.run_id}; {actor.id} is neither (nothing was changed)"
        )
    return current.run_id


@click.command()
@click.argument("run_or_thread")
@actor_options
@database_option
def resume(
    run_or_thread: str, as_user: str | None, operator: bool, database_url: str | None
) -> None:
    """Continue a run whose decisions are all in, or a paused run.

    RUN_OR_THREAD is a run id, or a thread id (its latest run). A run still waiting on
    open tickets stays as it is and its pending decisions are shown.

    \b
    Examples:
      signoff resume run_8c1d...
    """
    actor = actor_of(as_user, operator)

    async def body() -> RunResult:
        async with opened_runtime(database_url) as runtime:
            person = await runtime.identities.as_person(actor)
            run_id = await _controlled(runtime, run_or_thread, person, "resume", threads=True)
            done: RunResult = await runtime.resume(run_id, actor=person)
            return done

    print_run(run_coroutine(body()))


@click.command(short_help="Pause a run.")
@click.argument("run_id")
@actor_options
@database_option
def pause(run_id: str, as_user: str | None, operator: bool, database_url: str | None) -> None:
    """Pause a run: it takes no new steps; a tool already running settles first.

    `signoff resume RUN` continues it.

    \b
    Examples:
      signoff pause run_8c1d...
    """
    actor = actor_of(as_user, operator)

    async def body() -> RunResult:
        async with opened_runtime(database_url) as runtime:
            person = await runtime.identities.as_person(actor)
            await _controlled(runtime, run_id, person, "pause")
            done: RunResult = await runtime.pause(run_id, actor=person)
            return done

    result = run_coroutine(body())
    if result.status is RunStatus.RUNNING:
        click.echo(f"pause requested: run {run_id} pauses after its current step")
    else:
        print_run(result)


@click.command()
@click.argument("run_id")
@click.option("--reason", metavar="TEXT", help="Why, for the flight recorder.")
@actor_options
@database_option
def cancel(
    run_id: str,
    reason: str | None,
    as_user: str | None,
    operator: bool,
    database_url: str | None,
) -> None:
    """Cancel a run and void its open tickets. Completed tool calls are not undone.

    \b
    Examples:
      signoff cancel run_8c1d... --reason "customer withdrew the request"
    """
    actor = actor_of(as_user, operator)

    async def body() -> RunResult:
        async with opened_runtime(database_url) as runtime:
            person = await runtime.identities.as_person(actor)
            await _controlled(runtime, run_id, person, "cancel")
            done: RunResult = await runtime.cancel(run_id, actor=person, reason=reason)
            return done

    result = run_coroutine(body())
    if result.status is RunStatus.RUNNING:
        click.echo(f"cancel requested: run {run_id} stops after its current step")
    else:
        print_run(result)


@click.command(short_help="Continue ready and abandoned runs.")
@click.option(
    "--limit", default=1000, show_default=True, type=click.IntRange(1), help="At most N runs."
)
@database_option
def recover(limit: int, database_url: str | None) -> None:
    """Expire overdue tickets, then continue every run that is ready or was abandoned.

    Runs are picked up when they are queued (all decisions in) or their worker's lease
    expired (the process died). Calls that were dispatched without a recorded result
    follow their replay policy: safe and idempotent ones run again (idempotent with the
    same execution key); manual ones become uncertain and wait for `signoff resolve`.

    \b
    Examples:
      signoff recover
    """

    async def body() -> tuple[list[str], list[RunResult]]:
        async with opened_runtime(database_url) as runtime:
            expired = await runtime.expire_overdue(limit=limit)
            results = await runtime.recover(limit=limit)
            return expired, results

    expired, results = run_coroutine(body())
    for ticket_id in expired:
        click.echo(f"expired ticket {ticket_id}: its decision deadline passed")
    if not results:
        click.echo("nothing to recover")
    for result in results:
        print_run(result)
