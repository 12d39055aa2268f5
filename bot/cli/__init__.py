"""The ``signoff`` command line (also ``python -m bot``).

Every command builds what it needs from the settings (`bot.settings`) when it runs, and
every error the runtime raises on purpose becomes one line on stderr and a documented exit
code (`EXIT_CODES`), never a traceback.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import os
import re
import sys
import tempfile
import threading
import traceback
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, assert_never

import click

from bot import event_loop
from bot.settings import Settings, load_settings
from bot.wiring import (
    LoadedAgents,
    build_runtime,
    check_models,
    connected_agents,
    open_store,
    with_model_setting,
)
from runtime import (
    MAX_GRANT_HOURS,
    Actor,
    Agent,
    Allow,
    Answer,
    BatchItem,
    BatchOutcome,
    ConfigurationError,
    Deny,
    Expired,
    Grant,
    GrantNotActive,
    GrantRequest,
    InvalidAnswer,
    NotAwaiting,
    PendingEntry,
    Permission,
    RefusalReason,
    ResolutionError,
    RunNotFound,
    RunResult,
    RunStatus,
    Runtime,
    SignoffError,
    StaleTicket,
    StorageError,
    TicketStatus,
    Tool,
    Unauthorized,
    UnknownExecutionKey,
    UnknownGrant,
    usage_of_events,
    visibility,
)
from runtime.jsontext import NonFiniteNumber, loads_strict
from runtime.store.sql import SchemaStatus

# --- exit codes --------------------------------------------------------------------------

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_NOT_FOUND = 4
EXIT_NOT_AWAITING = 5
EXIT_EXPIRED = 6
EXIT_UNAUTHORIZED = 7
EXIT_STALE = 8
EXIT_BAD_ANSWER = 9
EXIT_STORAGE = 10
EXIT_RUN_FAILED = 11
EXIT_INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_INTERNAL: "unexpected internal error (a bug: please report it)",
    EXIT_USAGE: "bad command line: unknown option, missing argument, invalid JSON, no "
    "answer at a prompt (end of standard input)",
    EXIT_CONFIG: "configuration error: an invalid SIGNOFF_* setting or SIGNOFF_APP",
    EXIT_NOT_FOUND: "no such run, ticket, execution key or grant",
    EXIT_NOT_AWAITING: "nothing to decide: the ticket was already decided, voided or the run "
    "cannot do that now (or the grant was already revoked or expired)",
    EXIT_EXPIRED: "the ticket's decision deadline has passed",
    EXIT_UNAUTHORIZED: "the acting user may not decide this ticket or control this run",
    EXIT_STALE: "the agent or its tools changed since the run parked",
    EXIT_BAD_ANSWER: "the answer does not fit the ticket (or fails its input schema)",
    EXIT_STORAGE: "the database failed",
    EXIT_RUN_FAILED: "signoff demo: the run failed (its model or a tool failed)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}

# Most specific first: the first matching class decides the code and the label.
_ERROR_MAP: tuple[tuple[type[BaseException], int, str], ...] = (
    (InvalidAnswer, EXIT_BAD_ANSWER, "invalid answer"),
    (ResolutionError, EXIT_BAD_ANSWER, "answer does not fit"),
    (UnknownExecutionKey, EXIT_NOT_FOUND, "not found"),
    (RunNotFound, EXIT_NOT_FOUND, "not found"),
    (UnknownGrant, EXIT_NOT_FOUND, "not found"),
    (GrantNotActive, EXIT_NOT_AWAITING, "conflict"),
    (NotAwaiting, EXIT_NOT_AWAITING, "conflict"),
    (Expired, EXIT_EXPIRED, "expired"),
    (Unauthorized, EXIT_UNAUTHORIZED, "not allowed"),
    (StaleTicket, EXIT_STALE, "stale ticket"),
    (ConfigurationError, EXIT_CONFIG, "configuration"),
    (StorageError, EXIT_STORAGE, "database"),
    (SignoffError, EXIT_INTERNAL, "error"),
)

_HINTS: dict[type[BaseException], str] = {
    StaleTicket: "the run parked under another agent definition; check SIGNOFF_APP, "
    "SIGNOFF_AGENTS and its MCP servers",
}

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


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


def _one_line(text: str) -> str:
    return " ".join(_CONTROL.sub(" ", text).split())


def _clip(text: str, width: int) -> str:
    clean = _one_line(text)
    return clean if len(clean) <= width else clean[: max(width - 1, 0)] + "…"


def _fail(label: str, message: str, code: int) -> int:
    click.echo(f"signoff: {label}: {_one_line(message)}", err=True)
    return code


# --- shared state and options ------------------------------------------------------------


@dataclass
class _State:
    """What the root command hands to its subcommands."""

    config: Path | None
    loaded: Settings | None = field(default=None, init=False)

    def settings(self, database_url: str | None = None) -> Settings:
        settings = load_settings(
            self.config,
            overrides={"database_url": database_url},
            override_names={"database_url": "--database-url"},
        )
        if self.loaded is None:
            from bot.logs import configure_logging

            configure_logging(settings.log_level, json_lines=False)
        self.loaded = settings
        return settings


def _state() -> _State:
    state = click.get_current_context().find_object(_State)
    assert state is not None
    return state


def _login() -> str:
    try:
        return getpass.getuser() or "unknown"
    except Exception:  # no login name in some containers
        return "unknown"


def _actor_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("the user id cannot be empty")
    return value.strip() if value else value


_F = TypeVar("_F", bound=Callable[..., Any])


def database_option(fn: _F) -> _F:
    """``--database-url``: the store to work on (default: SIGNOFF_DATABASE_URL)."""
    return click.option(
        "--database-url",
        metavar="URL",
        help="Database to work on (default: SIGNOFF_DATABASE_URL, else "
        "sqlite+aiosqlite:///signoff.db in the working directory).",
    )(fn)


def actor_options(fn: _F) -> _F:
    """``--as USER`` and ``--operator/--no-operator``: who acts."""
    fn = click.option(
        "--operator/--no-operator",
        default=True,
        show_default=True,
        help="Act with operator authority (may decide any ticket, except where four-eyes "
        "forbids the requester). --no-operator checks the ticket's approvers as a chat "
        "click would.",
    )(fn)
    return click.option(
        "--as",
        "as_user",
        metavar="USER",
        callback=_actor_id,
        help="The acting user id, recorded in the flight recorder "
        "(default: operator:<your login name>).",
    )(fn)


def resume_option(fn: _F) -> _F:
    """``--resume/--no-resume``."""
    return click.option(
        "--resume/--no-resume",
        default=True,
        show_default=True,
        help="Continue the run in this process when this was its last open decision. "
        "--no-resume leaves it queued for `signoff resume` or a worker.",
    )(fn)


def grant_options(fn: _F) -> _F:
    """``--grant run|thread`` and ``--hours N``: a standing grant given with an allow."""
    fn = click.option(
        "--hours",
        type=float,
        metavar="N",
        help="How long the grant lasts (more than 0, at most 720; default: a thread grant "
        "8 hours, a run grant as long as the run).",
    )(fn)
    return click.option(
        "--grant",
        type=click.Choice(["run", "thread"]),
        help="Also allow the tool's later calls without asking: for the rest of this run, "
        "or in this thread (the requester's runs) for --hours, as far as the tool allows.",
    )(fn)


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


def _actor(as_user: str | None, operator: bool) -> Actor:
    login = _login()
    return Actor(id=as_user or f"operator:{login}", operator=operator, platform="cli", name=login)


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


@asynccontextmanager
async def _runtime(database_url: str | None) -> AsyncIterator[Runtime]:
    settings = _state().settings(database_url)
    async with connected_agents(settings) as loaded:
        runtime, store = await build_runtime(settings, loaded.agents)
        try:
            yield runtime
        finally:
            await runtime.aclose()
            await store.close()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- output ------------------------------------------------------------------------------


def _time(value: datetime | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _until(deadline: datetime | None) -> str:
    if deadline is None:
        return "none"
    left = int((deadline - datetime.now(UTC)).total_seconds())
    if left <= 0:
        return f"{_time(deadline)} (passed)"
    hours, rest = divmod(left, 3600)
    minutes = rest // 60
    span = f"{hours}h{minutes:02d}m" if hours else f"{max(minutes, 1)}m"
    return f"{_time(deadline)} (in {span})"


def _shorten(value: Any, limit: int = 400) -> Any:
    """Long strings inside a JSON value cut to `limit` characters, for display."""
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"… (+{len(value) - limit} chars)"
    if isinstance(value, dict):
        return {k: _shorten(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, limit) for v in value]
    return value


def _pretty(value: Any) -> str:
    # json.dumps escapes control characters, so model-made text cannot drive the terminal.
    return json.dumps(_shorten(value), indent=2, ensure_ascii=False, default=str)


def _compact(value: Any) -> str:
    return json.dumps(_shorten(value, 120), ensure_ascii=False, default=str)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    for row in (headers, *rows):
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        click.echo("  ".join(cells).rstrip())


def _who(entry: PendingEntry) -> str:
    return f"{entry.ticket.who_may_decide()}; operators may too"


def _print_pending(entry: PendingEntry, indent: str = "  ") -> None:
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
    line("Arguments", _pretty(entry.call.arguments))
    if entry.status == "approval" and entry.prompt:
        line("Model's reason", _one_line(entry.prompt))
    if entry.status == "input":
        line("Question", _one_line(entry.prompt or ""))
        line("Answer schema", _pretty(entry.schema or {}))
    if entry.status == "uncertain":
        line(
            "Uncertain",
            f"dispatched {entry.call.attempts} time(s), outcome never recorded",
        )
    line("Execution key", entry.execution_key)
    line("Requested by", entry.ticket.requester or "-")
    line("Who may decide", _who(entry))
    line("Deadline", _until(entry.ticket.deadline))


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


def _print_run(result: RunResult) -> None:
    run = result.run_id
    match result.status:
        case RunStatus.DONE:
            click.echo(f"run {run} is done: {_one_line(result.text or '')}")
        case RunStatus.AWAITING:
            count = len(result.pending)
            click.echo(f"run {run} is awaiting {count} decision{'s' if count != 1 else ''}:")
            for entry in result.pending:
                click.echo("")
                _print_pending(entry)
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
            click.echo(f"run {run} failed: {_one_line(result.error or 'unknown error')}")
        case RunStatus.CANCELLED:
            click.echo(f"run {run} is cancelled")


def _event_line(event: dict[str, Any]) -> str:
    data = event.get("data") or {}
    parts = [f"by={event['actor']}"] if event.get("actor") else []
    for key, value in data.items():
        if value is None or value == {} or value == [] or key == "actor":
            continue
        shown = value if isinstance(value, str) else _compact(value)
        parts.append(f"{key}={_clip(str(shown), 80)}")
    at = datetime.fromisoformat(event["at"]).astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]
    detail = _clip(" ".join(parts), 150)
    return f"  {event['seq']:>3}  {at}  {event['kind']:<17} {detail}"


def _print_events(events: Sequence[dict[str, Any]]) -> None:
    day = (
        datetime.fromisoformat(events[0]["at"]).astimezone(UTC).strftime("%Y-%m-%d")
        if events
        else "-"
    )
    click.echo(f"Flight recorder ({len(events)} events, times UTC on {day}):")
    for event in events:
        click.echo(_event_line(event).rstrip())


def _permission(agent: Agent, name: str) -> tuple[str, str]:
    """The tool's permission, and a note describing a rule."""
    tool = agent.tools[name]
    if isinstance(tool.permission, Permission):
        return tool.permission.value, ""
    rule = tool.permission
    doc = (getattr(rule, "__doc__", None) or "").strip().splitlines()
    label = getattr(rule, "__name__", "rule")
    return "rule", f"{label}: {doc[0]}" if doc else label


def _approval_notes(agent: Agent, tool: Tool) -> list[str]:
    """What an approver of `tool` may do besides allowing the call as it is."""
    scopes = agent.grants_for(tool)
    notes = ["grants " + ", ".join(scopes) if scopes else "no grants"]
    match tool.editable:
        case True:
            pass
        case False:
            notes.append("no edits")
        case fields:
            notes.append("edits " + ", ".join(sorted(fields)))
    return notes


def _span(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{v}{u}" for v, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return "".join(parts) or "0s"


# --- the commands --------------------------------------------------------------------------

_EPILOG = "\b\nExit codes:\n" + "\n".join(f"  {code:<4}{text}" for code, text in EXIT_CODES.items())


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=_EPILOG,
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SIGNOFF_CONFIG",
    metavar="PATH",
    help="TOML file with settings (keys like database_url, port); SIGNOFF_* environment "
    "variables override it. Also read from SIGNOFF_CONFIG.",
)
@click.version_option(package_name="signoff", prog_name="signoff", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, config: Path | None) -> None:
    """Run AI agents whose risky tool calls wait for a person's sign-off.

    Runs that need a decision park in the database behind resume tickets; these
    commands show and decide them. Settings come from SIGNOFF_* environment variables
    (see the README), e.g. SIGNOFF_DATABASE_URL and SIGNOFF_APP.

    \b
    Examples:
      signoff demo                      # a scripted agent end to end, in the terminal
      signoff tickets                   # what waits for a decision
      signoff approve tk_3f9a... --as U024BE7LH
      signoff runs show run_8c1d... --events
    """
    ctx.obj = _State(config)


@cli.command()
@click.option(
    "--database",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="SQLite file to keep the demo run in (default: a temporary file, deleted after).",
)
@click.option(
    "--yes",
    "--no-input",
    "yes",
    is_flag=True,
    help="Approve every request without asking (for scripts and CI).",
)
@click.option(
    "--message",
    default=None,
    metavar="TEXT",
    help="What the customer asks (default: a double charge of 249.00 on order A1001, "
    "which needs approval; order A1002 is small enough to be refunded at once).",
)
def demo(database: Path | None, yes: bool, message: str | None) -> int:
    """Run the refunds example end to end in the terminal.

    The agent (a scripted model, no network, unless SIGNOFF_MODEL names a real one)
    looks an order up and proposes a refund.
    Refunds over 100 need a person: the run parks in a SQLite database, the pending call
    is shown, and you decide from the keyboard: y allows it, n denies it, r denies it
    with a reason the model gets to see. The run then continues and the flight recorder
    is printed. A run that fails (its model cannot be reached, say) exits with 11.

    \b
    Examples:
      signoff demo
      signoff demo --yes --database demo.db
      signoff demo --message "Order A1002 was charged twice"
    """
    from examples import refunds

    state = _state()
    with tempfile.TemporaryDirectory(prefix="signoff-demo-") as tmp:
        path = (database or Path(tmp) / "demo.db").expanduser().resolve()
        settings = state.settings(f"sqlite+aiosqlite:///{path}")
        agent = refunds.build_agent()
        text = message or refunds.DEMO_INPUT
        ended: RunResult = _run(
            _demo(settings, agent, text, yes=yes, kept=path if database else None)
        )
    if ended.status is RunStatus.FAILED:
        return _fail("run failed", ended.error or "unknown error", EXIT_RUN_FAILED)
    return EXIT_OK


async def _demo(
    settings: Settings, agent: Agent, text: str, *, yes: bool, kept: Path | None
) -> RunResult:
    login = _login()
    me = Actor(id=f"cli:{login}", platform="cli", name=login)
    keyboard = None if yes else _Keyboard()
    runtime, store = await build_runtime(settings, agents=with_model_setting(settings, [agent]))
    try:
        model = runtime.agents[agent.name].model_name
        offline = " (scripted, no network)" if model.startswith("scripted") else ""
        click.echo(f"Agent {agent.name!r} on model {model}{offline}.")
        click.echo(f"Database: {kept or 'a temporary SQLite file'}")
        click.echo(f"\n{me.id} asks: {text}\n")
        result = await runtime.start(agent.name, text, requester=me.id)
        if result.status is RunStatus.DONE:
            click.echo("No call needed a decision.")
        while result.status is RunStatus.AWAITING and result.pending:
            entry = result.pending[0]
            click.echo(f"Run {result.run_id} parked; it waits for a decision:\n")
            _print_pending(entry)
            click.echo("")
            result = await _decide_at_keyboard(runtime, entry, me, keyboard)
        click.echo("")
        if result.status is RunStatus.DONE:
            click.echo(f"Answer: {_one_line(result.text or '')}")
        elif result.status is RunStatus.FAILED:
            click.echo(f"The run failed: {_one_line(result.error or 'unknown error')}")
        click.echo(
            f"Run {result.run_id}: {result.status} · {result.turns} model calls · "
            f"{result.total_tokens} tokens\n"
        )
        _print_events(await runtime.events(result.run_id))
        if kept is not None:
            click.echo(
                f"\nLook again: signoff runs show {result.run_id} --events "
                f"--database-url sqlite+aiosqlite:///{kept}"
            )
        return result
    finally:
        await runtime.aclose()
        await store.close()


class _Keyboard:
    """Lines typed on standard input, read by a daemon thread while the event loop waits.

    A prompt read on the loop's own thread would block it, and asyncio's Ctrl-C handler
    (which only cancels the main task at its next step) would let the first Ctrl-C pass
    unnoticed; the signal may even reach another thread and not interrupt the read at
    all. Awaiting the line instead, the first Ctrl-C cancels the demo at once.
    """

    def __init__(self) -> None:
        self._unread = b""

    def _line(self) -> str | None:
        """The next line, or None at the end of the input (blocks: runs in the thread)."""
        while b"\n" not in self._unread:
            chunk = os.read(sys.stdin.fileno(), 4096)
            if not chunk:
                rest, self._unread = self._unread, b""
                return rest.decode(errors="replace") if rest else None
            self._unread += chunk
        line, self._unread = self._unread.split(b"\n", 1)
        return line.decode(errors="replace")

    async def ask(self, question: str) -> str:
        """Print `question` and wait for the answer (a usage error at the end of input)."""
        click.echo(f"{question} ", nl=False)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str | None] = loop.create_future()

        def settle(line: str | None, error: OSError | None) -> None:
            if answer.done():
                return
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(line)

        def read() -> None:
            try:
                line, error = self._line(), None
            except OSError as exc:
                line, error = None, exc
            with suppress(RuntimeError):  # the loop is closed: the demo was stopped
                loop.call_soon_threadsafe(settle, line, error)

        threading.Thread(target=read, name="signoff-keyboard", daemon=True).start()
        line = await answer
        if line is None:
            click.echo("")
            raise click.UsageError(
                "no answer on standard input; pass --yes to approve without asking"
            )
        return _one_line(line)


async def _decide_at_keyboard(
    runtime: Runtime, entry: PendingEntry, me: Actor, keyboard: _Keyboard | None
) -> RunResult:
    if entry.status != "approval":
        raise click.UsageError(
            f"the demo only decides approvals; answer {entry.ticket_id} with `signoff`"
        )
    if keyboard is None:
        click.echo("Allow? [y/n/r=deny with reason] y (--yes)")
        choice = "y"
    else:
        choice = (await keyboard.ask("Allow? [y/n/r=deny with reason]")).lower()
        while choice not in ("y", "yes", "n", "no", "r"):
            click.echo("Please answer y (allow), n (deny) or r (deny with a reason).")
            choice = (await keyboard.ask("Allow? [y/n/r=deny with reason]")).lower()
    if choice in ("y", "yes"):
        click.echo(f"Allowed by {me.id}; the tool runs now.")
        return await runtime.approve(entry, actor=me, resume=True)
    reason = None
    if choice == "r" and keyboard is not None:
        while not reason:
            reason = await keyboard.ask("Reason (the model sees it):")
    click.echo(f"Denied by {me.id}; the tool does not run, the model is told.")
    return await runtime.decline(entry, actor=me, reason=reason, resume=True)


# --- runs -----------------------------------------------------------------------------------


@cli.group()
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
    viewer = _actor(as_user, operator)

    async def body() -> list[dict[str, Any]]:
        async with _runtime(database_url) as runtime:
            rows = []
            wanted = [RunStatus(s) for s in statuses]
            visible = [
                r.run_id
                for r in await runtime.list_runs(statuses=wanted, limit=limit, viewer=viewer)
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

    rows = _run(body())
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    if not rows:
        click.echo("no runs")
        return
    _table(
        ["RUN", "STATUS", "AGENT", "REQUESTER", "PENDING", "TURNS", "UPDATED", "INPUT"],
        [
            [
                r["run_id"],
                r["status"],
                _clip(r["agent"], 20),
                _clip(r["requester"] or "-", 24),
                str(r["pending"]),
                str(r["turns"]),
                _time(r["updated_at"]),
                _clip(r["input"], 50),
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
    viewer = _actor(as_user, operator)

    async def body() -> None:
        async with _runtime(database_url) as runtime:
            if jsonl:
                click.echo(await runtime.export_events(run_id, viewer=viewer), nl=False)
                return
            result = await runtime.get(run_id, viewer=viewer)
            async with runtime.store.transaction() as tx:
                record = await tx.get_run(run_id)
                calls = await tx.calls_for_run(run_id)
            events = await runtime.events(run_id, viewer=viewer)
            agent = runtime.agents.get(result.agent)
        assert record is not None
        fields = [
            ("run", result.run_id),
            ("status", result.status.value),
            ("agent", result.agent),
            ("thread", result.thread_id),
            ("requester", result.requester or "-"),
            ("started", _time(record.created_at)),
            ("updated", _time(record.updated_at)),
            ("input", _one_line(record.input)),
        ]
        if result.text is not None:
            fields.append(("answer", _one_line(result.text)))
        if result.error is not None:
            fields.append(("error", _one_line(result.error)))
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
                        _clip(_compact(args), 50),
                        _clip(_compact(outcome) if outcome is not None else "-", 50),
                    ]
                )
            _table(["#", "TOOL", "STATE", "TRIES", "EXECUTION KEY", "ARGUMENTS", "RESULT"], rows)
        if result.pending:
            click.echo("")
            _print_run(result)
        if with_events:
            click.echo("")
            _print_events(events)

    _run(body())


# --- tickets and decisions ------------------------------------------------------------------


@cli.command(short_help="List open tickets.")
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
    viewer = _actor(as_user, operator)

    async def body() -> list[PendingEntry]:
        async with _runtime(database_url) as runtime:
            found: list[PendingEntry] = await runtime.open_tickets(limit=limit, viewer=viewer)
            return found

    entries: list[PendingEntry] = _run(body())
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
    _table(
        ["TICKET", "WAITS FOR", "RUN", "AGENT", "TOOL", "ARGUMENTS", "WHO MAY DECIDE", "DEADLINE"],
        [
            [
                e.ticket_id,
                e.status,
                e.ticket.run_id,
                _clip(e.ticket.agent, 20),
                _clip(e.call.name, 24),
                _clip(_compact(e.call.arguments), 48),
                _clip(e.ticket.who_may_decide(), 36),
                _time(e.ticket.deadline) if e.ticket.deadline else "-",
            ]
            for e in entries
        ],
    )


def _decided(verb: str, ref: str, actor: Actor, result: RunResult) -> None:
    click.echo(f"{verb} {ref} as {actor.id}")
    _print_run(result)


@cli.command()
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
    actor = _actor(as_user, operator)
    request = _grant_request(grant, hours)

    async def body() -> RunResult:
        async with _runtime(database_url) as runtime:
            done: RunResult = await runtime.approve(
                ticket, actor=actor, resume=resume, grant=request, args=args
            )
            return done

    _decided("approved", ticket, actor, _run(body()))


@cli.command()
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
    actor = _actor(as_user, operator)

    async def body() -> RunResult:
        async with _runtime(database_url) as runtime:
            done: RunResult = await runtime.decline(
                ticket, actor=actor, reason=reason, resume=resume
            )
            return done

    _decided("denied", ticket, actor, _run(body()))


@cli.command(short_help="Answer a typed-input request.")
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
    actor = _actor(as_user, operator)

    async def body() -> RunResult:
        async with _runtime(database_url) as runtime:
            done: RunResult = await runtime.answer(ticket, value, actor=actor, resume=resume)
            return done

    _decided("answered", ticket, actor, _run(body()))


@cli.command(short_help="Resolve an uncertain call.")
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
    actor = _actor(as_user, operator)

    async def body() -> RunResult:
        async with _runtime(database_url) as runtime:
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

    _decided("resolved", ticket, actor, _run(body()))


# --- run control --------------------------------------------------------------------------


@cli.command()
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
    actor = _actor(as_user, operator)

    async def body() -> RunResult:
        async with _runtime(database_url) as runtime:
            run_id = await _controlled(runtime, run_or_thread, actor, "resume", threads=True)
            done: RunResult = await runtime.resume(run_id, actor=actor)
            return done

    _print_run(_run(body()))


@cli.command(short_help="Pause a run.")
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
    actor = _actor(as_user, operator)

    async def body() -> RunResult:
        async with _runtime(database_url) as runtime:
            await _controlled(runtime, run_id, actor, "pause")
            done: RunResult = await runtime.pause(run_id, actor=actor)
            return done

    result = _run(body())
    if result.status is RunStatus.RUNNING:
        click.echo(f"pause requested: run {run_id} pauses after its current step")
    else:
        _print_run(result)


@cli.command()
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
    actor = _actor(as_user, operator)

    async def body() -> RunResult:
        async with _runtime(database_url) as runtime:
            await _controlled(runtime, run_id, actor, "cancel")
            done: RunResult = await runtime.cancel(run_id, actor=actor, reason=reason)
            return done

    result = _run(body())
    if result.status is RunStatus.RUNNING:
        click.echo(f"cancel requested: run {run_id} stops after its current step")
    else:
        _print_run(result)


@cli.command(short_help="Continue ready and abandoned runs.")
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
        async with _runtime(database_url) as runtime:
            expired = await runtime.expire_overdue(limit=limit)
            results = await runtime.recover(limit=limit)
            return expired, results

    expired, results = _run(body())
    for ticket_id in expired:
        click.echo(f"expired ticket {ticket_id}: its decision deadline passed")
    if not results:
        click.echo("nothing to recover")
    for result in results:
        _print_run(result)


@cli.command()
@database_option
def serve(database_url: str | None) -> None:
    """Serve signoff: web console, JSON API, webhooks and the run workers.

    One process runs the HTTP server (console at /, JSON API under /api, signed
    webhooks at /hooks/NAME, /healthz, /readyz, /metrics), the workers that drive
    ready runs, the outbox delivery loop and the deadline loop. Parked runs cost no
    memory: they wait in the database. SIGTERM or Ctrl-C stops taking work, lets
    running tools settle (SIGNOFF_SHUTDOWN_GRACE_SECONDS) and exits; a restart picks
    everything up again.

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
    """
    from bot.logs import configure_logging
    from bot.serve import serve as serve_forever

    settings = _state().settings(database_url)
    configure_logging(settings.log_level)
    event_loop.run(serve_forever(settings), settings.event_loop)


@cli.command()
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
    settings = _state().settings(database_url)

    async def body() -> tuple[SchemaStatus, SchemaStatus]:
        store = open_store(settings)
        try:
            before = await store.schema_status()
            if before.state not in ("current", "newer_compatible"):
                await store.migrate()
            return before, await store.schema_status()
        finally:
            await store.close()

    before, after = _run(body())
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


@cli.command(short_help="List loaded agents and their tools.")
def agents() -> None:
    """List the agents of SIGNOFF_APP and SIGNOFF_AGENTS with each tool's source,
    permission and replay policy.

    MCP servers of the agents file are connected to list their tools; a tool's source is
    python or mcp:SERVER (unavailable while the server cannot be reached).

    \b
    Examples:
      signoff agents
      SIGNOFF_APP=myapp.agents:build signoff agents
      SIGNOFF_AGENTS=agents.toml signoff agents
    """
    settings = _state().settings()

    async def body() -> None:
        async with connected_agents(settings) as loaded:
            check_models(settings, loaded.agents)
            _print_agents(loaded)

    _run(body())


def _print_agents(loaded: LoadedAgents) -> None:
    count = len(loaded.agents)
    click.echo(f"{count} agent{'s' if count != 1 else ''} from {loaded.origin}")
    for agent in loaded.agents:
        click.echo("")
        click.echo(f"{agent.name} (version {agent.version}, model {agent.model_name})")
        if agent.description:
            click.echo(f"  {agent.description}")
        rows = []
        for name in sorted(agent.tools):
            tool = agent.tools[name]
            permission, rule = _permission(agent, name)
            notes = [rule] if rule else []
            approvers = agent.approvers_for(tool)
            if approvers:
                notes.append("approvers " + ", ".join(approvers))
            if agent.four_eyes_for(tool):
                notes.append("four-eyes")
            deadline = agent.deadline_for(tool)
            if deadline is not None:
                notes.append(f"deadline {_span(deadline.total_seconds())}")
            if tool.secret:
                notes.append("secret " + ", ".join(sorted(tool.secret)))
            if permission != "allow" and permission != "deny":
                notes.extend(_approval_notes(agent, tool))
            source = loaded.source_of(agent.name, name)
            rows.append([f"  {name}", source, permission, tool.replay_policy, "; ".join(notes)])
        _table(["  TOOL", "SOURCE", "PERMISSION", "REPLAY", "NOTES"], rows)


# --- standing grants ------------------------------------------------------------------------


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
            return f"revoked {_time(grant.revoked_at)} by {_clip(grant.revoked_by or '?', 24)}"
        case "expired":
            return f"expired {_time(grant.expires_at)}"
        case "ended":
            return "ended with its run"
        case "active":
            return _until(grant.expires_at) if grant.expires_at else "with its run"
        case _:
            assert_never(grant.state)


@cli.group()
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
    viewer = _actor(as_user, operator)

    async def body() -> list[Grant]:
        async with _runtime(database_url) as runtime:
            found: list[Grant] = await runtime.grants(
                viewer=viewer,
                run_id=run_id,
                thread_id=thread_id,
                active=not show_all,
                limit=limit,
            )
            return found

    found: list[Grant] = _run(body())
    if as_json:
        click.echo(json.dumps([_grant_json(g) for g in found], indent=2, ensure_ascii=False))
        return
    if not found:
        click.echo("no grants" if show_all else "no active grants")
        return
    _table(
        ["GRANT", "STATE", "AGENT", "COVERS", "GRANTED BY", "RUN", "UNTIL"],
        [
            [
                g.grant_id,
                g.state,
                _clip(g.agent, 20),
                _clip(g.covers, 60),
                _clip(g.granted_by, 24),
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
    actor = _actor(as_user, operator)

    async def body() -> Grant:
        async with _runtime(database_url) as runtime:
            done: Grant = await runtime.revoke_grant(grant_id, actor=actor)
            return done

    revoked: Grant = _run(body())
    click.echo(f"revoked {revoked.grant_id} ({_one_line(revoked.covers)}) as {actor.id}")


# --- batch decisions ------------------------------------------------------------------------

_REFUSAL_EXITS: dict[RefusalReason, int] = {
    RefusalReason.UNKNOWN_TICKET: EXIT_NOT_FOUND,
    RefusalReason.UNKNOWN_RUN: EXIT_NOT_FOUND,
    RefusalReason.ALREADY_DECIDED: EXIT_NOT_AWAITING,
    RefusalReason.VOIDED: EXIT_NOT_AWAITING,
    RefusalReason.NOT_AWAITING: EXIT_NOT_AWAITING,
    RefusalReason.MISMATCH: EXIT_NOT_AWAITING,
    RefusalReason.EXPIRED: EXIT_EXPIRED,
    RefusalReason.UNAUTHORIZED: EXIT_UNAUTHORIZED,
    RefusalReason.FORBIDDEN: EXIT_UNAUTHORIZED,
    RefusalReason.STALE: EXIT_STALE,
    RefusalReason.STORAGE: EXIT_STORAGE,
}
"""Exit code of a refused batch item; any other reason is a bad answer (9)."""


@cli.command(short_help="Allow or deny several calls at once.")
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
    actor = _actor(as_user, operator)
    answer: Answer = Allow() if decision == "allow" else Deny(reason=reason)

    async def body() -> list[BatchOutcome]:
        async with _runtime(database_url) as runtime:
            chosen = list(ticket_ids)
            if run_id is not None:
                found = await runtime.get(run_id, viewer=actor)
                chosen += [p.ticket_id for p in found.pending if p.status == "approval"]
            chosen = list(dict.fromkeys(chosen))
            if not chosen:
                raise click.UsageError("name at least one TICKET, or a --run with open approvals")
            items = [BatchItem(ticket_id, answer) for ticket_id in chosen]
            done: list[BatchOutcome] = await runtime.decide_batch(items, actor, resume=resume)
            return done

    outcomes = _run(body())
    verb = "allowed" if decision == "allow" else "denied"
    code = EXIT_OK
    for outcome in outcomes:
        if outcome.refusal is None:
            result = outcome.result
            where = f" (run {result.run_id} is {result.status.value})" if result else ""
            click.echo(f"{verb} {outcome.ticket_id}{where}")
        else:
            click.echo(f"not decided {outcome.ticket_id}: {_one_line(outcome.refusal.message)}")
            if code == EXIT_OK:
                code = _REFUSAL_EXITS.get(outcome.refusal.reason, EXIT_BAD_ANSWER)
    applied = sum(1 for o in outcomes if o.applied)
    click.echo(f"{verb} {applied} of {len(outcomes)} as {actor.id}")
    if code != EXIT_OK:
        _fail("batch", f"{len(outcomes) - applied} of {len(outcomes)} not decided", code)
    return code


# --- entry point ----------------------------------------------------------------------------


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` and return its exit code (see `EXIT_CODES`)."""
    try:
        outcome = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="signoff",
            standalone_mode=False,
        )
    except click.exceptions.NoArgsIsHelpError as exc:
        # A group named without its command: its help as click prints it, not one line.
        click.echo(exc.ctx.get_help(), err=True)
        return EXIT_USAGE
    except click.UsageError as exc:
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return _fail("usage", exc.format_message() + where, EXIT_USAGE)
    except click.ClickException as exc:
        return _fail("error", exc.format_message(), exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        return _fail("interrupted", "stopped before finishing", EXIT_INTERRUPTED)
    except SignoffError as exc:
        for kind, code, label in _ERROR_MAP:
            if isinstance(exc, kind):
                hint = _HINTS.get(kind)
                return _fail(label, f"{exc} ({hint})" if hint else str(exc), code)
        return _fail("error", str(exc), EXIT_INTERNAL)  # pragma: no cover - SignoffError is last
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            traceback.print_exc()
            hint = ""
        else:
            hint = " (set SIGNOFF_LOG_LEVEL=DEBUG for a traceback)"
        return _fail("internal error", f"{type(exc).__name__}: {exc}{hint}", EXIT_INTERNAL)
    return outcome if isinstance(outcome, int) else EXIT_OK


def main() -> None:
    """The ``signoff`` console script."""
    sys.exit(run())
