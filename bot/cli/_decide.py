"""Deciding tickets: ``approve``, ``deny``, ``answer``, ``resolve`` and ``batch``."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from bot.cli._exits import (
    EXIT_BAD_ANSWER,
    EXIT_EXPIRED,
    EXIT_NOT_AWAITING,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_STALE,
    EXIT_STORAGE,
    EXIT_UNAUTHORIZED,
)
from bot.cli._options import (
    actor_of,
    actor_options,
    database_option,
    grant_options,
    opened_runtime,
    resume_option,
    run_coroutine,
)
from bot.cli._output import fail, one_line, print_run
from runtime import (
    MAX_GRANT_HOURS,
    Actor,
    Allow,
    Answer,
    BatchItem,
    BatchOutcome,
    Deny,
    GrantRequest,
    RefusalReason,
    RunResult,
)
from runtime.domain.jsontext import NonFiniteNumber, loads_strict


def _grant_request(scope: str | None, hours: float | None) -> GrantRequest | None:
    if scope is None:
        if hours is not None:
            raise click.BadParameter(
                "goes with --grant run or --grant thread", param_hint="'--hours'"
            )
        return None
    if hours is not None and not 0 < hours <= MAX_GRANT_HOURS:
        raise click.BadParameter(
            f"more than 0 and at most {MAX_GRANT_HOURS:g}", param_hint="'--hours'"
        )
    return GrantRequest(scope="thread" if scope == "thread" else "run", hours=hours)


def _parse_json(value: str, option: str) -> Any:
    text = sys.stdin.read() if value == "-" else value
    try:
        return loads_strict(text)
    except RecursionError:
        raise click.BadParameter(
            "not valid JSON (nested too deeply)", param_hint=f"'{option}'"
        ) from None
    except NonFiniteNumber as exc:
        raise click.BadParameter(f"not valid JSON ({exc})", param_hint=f"'{option}'") from None
    except json.JSONDecodeError as exc:
        hint = ""
        if option == "--result":
            hint = "; to record text, quote it as JSON, e.g. --result '\"refund re_42 issued\"'"
        raise click.BadParameter(
            f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}){hint}",
            param_hint=f"'{option}'",
        ) from None


def _decided(verb: str, ref: str, actor: Actor, result: RunResult) -> None:
    click.echo(f"{verb} {ref} as {actor.id}")
    print_run(result)


@click.command()
@click.argument("ticket")
@grant_options
@click.option(
    "--args",
    "args_json",
    metavar="JSON",
    help="Change these arguments before allowing, as a JSON object merged over the call's "
    "own ('-' reads it from standard input); checked against the tool's schema, its "
    "editable arguments and its permission rule.",
)
@actor_options
@resume_option
@database_option
def approve(
    ticket: str,
    grant: str | None,
    hours: float | None,
    args_json: str | None,
    as_user: str | None,
    operator: bool,
    resume: bool,
    database_url: str | None,
) -> None:
    """Allow a pending tool call; the tool runs when the run continues.

    TICKET is a ticket id or the call's execution key, as `signoff tickets` shows them.
    The run continues right here when this was its last open decision. With --grant,
    later calls of the tool run without asking too (see `signoff grants`). With --args
    the call runs with the changed arguments, and the model is told what changed.

    \b
    Examples:
      signoff approve tk_3f9a...
      signoff approve xk_77b0... --as U024BE7LH --no-operator
      signoff approve tk_3f9a... --no-resume
      signoff approve tk_3f9a... --grant run
      signoff approve tk_3f9a... --grant thread --hours 4
      signoff approve tk_3f9a... --args '{"amount": 200}'
    """
    args = None
    if args_json is not None:
        args = _parse_json(args_json, "--args")
        if not isinstance(args, dict):
            raise click.BadParameter(
                f"must be a JSON object like '{{\"amount\": 200}}', not {type(args).__name__}",
                param_hint="'--args'",
            )
    actor = actor_of(as_user, operator)
    request = _grant_request(grant, hours)

    async def body() -> RunResult:
        async with opened_runtime(database_url) as runtime:
            done: RunResult = await runtime.approve(
                ticket, actor=actor, resume=resume, grant=request, args=args
            )
            return done

    _decided("approved", ticket, actor, run_coroutine(body()))


@click.command()
@click.argument("ticket")
@click.option("--reason", metavar="TEXT", help="Why; the model sees it with the denial.")
@actor_options
@resume_option
@database_option
def deny(
    ticket: str,
    reason: str | None,
    as_user: str | None,
    operator: bool,
    resume: bool,
    database_url: str | None,
) -> None:
    """Deny a pending tool call (or input request); the tool never runs.

    The model gets a blocked result ("Permission denied: REASON") and the run goes on.
    TICKET is a ticket id or the call's execution key.

    \b
    Examples:
      signoff deny tk_3f9a... --reason "refunds over 200 need a manager"
    """
    actor = actor_of(as_user, operator)

    async def body() -> RunResult:
        async with opened_runtime(database_url) as runtime:
            done: RunResult = await runtime.decline(
                ticket, actor=actor, reason=reason, resume=resume
            )
            return done

    _decided("denied", ticket, actor, run_coroutine(body()))


@click.command(short_help="Answer a typed-input request.")
@click.argument("ticket")
@click.option(
    "--data",
    required=True,
    metavar="JSON",
    help="The answer as a JSON object ('-' reads it from standard input).",
)
@actor_options
@resume_option
@database_option
def answer(
    ticket: str,
    data: str,
    as_user: str | None,
    operator: bool,
    resume: bool,
    database_url: str | None,
) -> None:
    """Answer a typed-input request; the data is checked against the requested schema.

    `signoff tickets --json` shows each input request's JSON schema. The tool is called
    again with the answer when the run continues.

    \b
    Examples:
      signoff answer tk_5e21... --data '{"previous_version": "2.4.0",
                                         "strategy": "redeploy_previous"}'
      echo '{"previous_version": "2.4.0", "strategy": "redeploy_previous"}' \\
        | signoff answer tk_5e21... --data -
    """
    value = _parse_json(data, "--data")
    if not isinstance(value, dict):
        raise click.BadParameter(
            f'must be a JSON object like \'{{"field": "value"}}\', not {type(value).__name__}',
            param_hint="'--data'",
        )
    actor = actor_of(as_user, operator)

    async def body() -> RunResult:
        async with opened_runtime(database_url) as runtime:
            done: RunResult = await runtime.answer(ticket, value, actor=actor, resume=resume)
            return done

    _decided("answered", ticket, actor, run_coroutine(body()))


@click.command(short_help="Resolve an uncertain call.")
@click.argument("ticket")
@click.option("--result", "result_json", metavar="JSON", help="Record this verified result.")
@click.option("--retry", is_flag=True, help="Run the tool again (it may then run twice).")
@click.option("--abort", is_flag=True, help="Give up on the call; the model is told.")
@click.option("--reason", metavar="TEXT", help="With --abort: why (the model sees it).")
@actor_options
@resume_option
@database_option
def resolve(
    ticket: str,
    result_json: str | None,
    retry: bool,
    abort: bool,
    reason: str | None,
    as_user: str | None,
    operator: bool,
    resume: bool,
    database_url: str | None,
) -> None:
    """Resolve an uncertain call: one that started but whose outcome was never recorded.

    Check the outside world first (did the page go out? was the deploy rolled out?),
    then choose exactly one: --result JSON records what really happened without running
    the tool again, --retry runs it again, --abort gives up.

    \b
    Examples:
      signoff resolve tk_9d4e... --result '{"page_id": "pg_1", "status": "sent"}'
      signoff resolve tk_9d4e... --retry
      signoff resolve tk_9d4e... --abort --reason "paged by phone instead"
    """
    chosen = [result_json is not None, retry, abort]
    if sum(chosen) != 1:
        raise click.UsageError("choose exactly one of --result JSON, --retry, --abort")
    if reason is not None and not abort:
        raise click.UsageError("--reason goes with --abort")
    value = _parse_json(result_json, "--result") if result_json is not None else None
    actor = actor_of(as_user, operator)

    async def body() -> RunResult:
        async with opened_runtime(database_url) as runtime:
            done: RunResult
            if result_json is not None:
                done = await runtime.resolve_tool(ticket, result=value, actor=actor, resume=resume)
            elif retry:
                done = await runtime.resolve_tool(ticket, retry=True, actor=actor, resume=resume)
            else:
                done = await runtime.resolve_tool(
                    ticket, abort=True, reason=reason, actor=actor, resume=resume
                )
            return done

    _decided("resolved", ticket, actor, run_coroutine(body()))


_REFUSAL_EXITS: dict[RefusalReason, int] = {
    RefusalReason.UNKNOWN_TICKET: EXIT_NOT_FOUND,
    RefusalReason.UNKNOWN_RUN: EXIT_NOT_FOUND,
    RefusalReason.ALREADY_DECIDED: EXIT_NOT_AWAITING,
    RefusalReason.VOIDED: EXIT_NOT_AWAITING,
    RefusalReason.NOT_AWAITING: EXIT_NOT_AWAITING,
    RefusalReason.MISMATCH: EXIT_NOT_AWAITING,
    RefusalReason.EXPIRED: EXIT_EXPIRED,
    RefusalReason.UNAUTHORIZED: EXIT_UNAUTHORIZED,
    RefusalReason.NOT_LINKED: EXIT_UNAUTHORIZED,
    RefusalReason.FORBIDDEN: EXIT_UNAUTHORIZED,
    RefusalReason.STALE: EXIT_STALE,
    RefusalReason.STORAGE: EXIT_STORAGE,
}
"""Exit code of a refused batch item; any other reason is a bad answer (9)."""


@click.command(short_help="Allow or deny several calls at once.")
@click.argument("decision", type=click.Choice(["allow", "deny"]))
@click.argument("ticket_ids", metavar="[TICKET]...", nargs=-1)
@click.option("--run", "run_id", metavar="RUN", help="Also every open approval of this run.")
@click.option("--reason", metavar="TEXT", help="With deny: why; the model sees it.")
@actor_options
@resume_option
@database_option
def batch(
    decision: str,
    ticket_ids: tuple[str, ...],
    run_id: str | None,
    reason: str | None,
    as_user: str | None,
    operator: bool,
    resume: bool,
    database_url: str | None,
) -> int:
    """Allow or deny several pending calls in one go, each checked and applied on its own.

    TICKET is a ticket id as `signoff tickets` shows them; --run adds every open approval
    of a run. One line per ticket says whether it was decided; a ticket that cannot be
    (already decided, not yours to decide) does not stop the others. Exits 0 when every
    one was decided, else with the code of the first refusal.

    \b
    Examples:
      signoff batch allow tk_3f9a... tk_77b0...
      signoff batch deny --run run_5e21... --reason "not during the freeze"
    """
    if reason is not None and decision != "deny":
        raise click.BadParameter("goes with deny", param_hint="'--reason'")
    actor = actor_of(as_user, operator)
    answer: Answer = Allow() if decision == "allow" else Deny(reason=reason)

    async def body() -> list[BatchOutcome]:
        async with opened_runtime(database_url) as runtime:
            chosen = list(ticket_ids)
            if run_id is not None:
                found = await runtime.get(run_id, viewer=await runtime.identities.as_person(actor))
                chosen += [p.ticket_id for p in found.pending if p.status == "approval"]
            chosen = list(dict.fromkeys(chosen))
            if not chosen:
                raise click.UsageError("name at least one TICKET, or a --run with open approvals")
            items = [BatchItem(ticket_id, answer) for ticket_id in chosen]
            done: list[BatchOutcome] = await runtime.decide_batch(items, actor, resume=resume)
            return done

    outcomes = run_coroutine(body())
    verb = "allowed" if decision == "allow" else "denied"
    code = EXIT_OK
    for outcome in outcomes:
        if outcome.refusal is None:
            result = outcome.result
            where = f" (run {result.run_id} is {result.status.value})" if result else ""
            click.echo(f"{verb} {outcome.ticket_id}{where}")
        else:
            click.echo(f"not decided {outcome.ticket_id}: {one_line(outcome.refusal.message)}")
            if code == EXIT_OK:
                code = _REFUSAL_EXITS.get(outcome.refusal.reason, EXIT_BAD_ANSWER)
    applied = sum(1 for o in outcomes if o.applied)
    click.echo(f"{verb} {applied} of {len(outcomes)} as {actor.id}")
    if code != EXIT_OK:
        fail("batch", f"{len(outcomes) - applied} of {len(outcomes)} not decided", code)
    return code
