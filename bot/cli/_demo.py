"""``signoff demo``: the refunds example end to end, decided at the keyboard."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import threading
from contextlib import suppress
from pathlib import Path

import click

from bot.cli._exits import EXIT_OK, EXIT_RUN_FAILED
from bot.cli._options import cli_state, login_name, run_coroutine
from bot.cli._output import fail, one_line, print_events, print_pending
from bot.settings import Settings
from bot.wiring import with_model_setting
from runtime import Actor, Agent, PendingEntry, RunResult, RunStatus, Runtime


@click.command()
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

    state = cli_state()
    with tempfile.TemporaryDirectory(prefix="signoff-demo-") as tmp:
        path = (database or Path(tmp) / "demo.db").expanduser().resolve()
        settings = state.settings(f"sqlite+aiosqlite:///{path}")
        agent = refunds.build_agent()
        text = message or refunds.DEMO_INPUT
        ended: RunResult = run_coroutine(
            _demo(settings, agent, text, yes=yes, kept=path if database else None)
        )
    if ended.status is RunStatus.FAILED:
        return fail("run failed", ended.error or "unknown error", EXIT_RUN_FAILED)
    return EXIT_OK


async def _demo(
    settings: Settings, agent: Agent, text: str, *, yes: bool, kept: Path | None
) -> RunResult:
    login = login_name()
    me = Actor(id=f"cli:{login}", platform="cli", name=login)
    keyboard = None if yes else _Keyboard()
    from bot.bootstrap import open_runtime  # the serving process's modules, when needed

    agents = with_model_setting(settings, [agent])
    async with open_runtime(settings, agents=agents) as runtime:
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
            print_pending(entry)
            click.echo("")
            result = await _decide_at_keyboard(runtime, entry, me, keyboard)
        click.echo("")
        if result.status is RunStatus.DONE:
            click.echo(f"Answer: {one_line(result.text or '')}")
        elif result.status is RunStatus.FAILED:
            click.echo(f"The run failed: {one_line(result.error or 'unknown error')}")
        click.echo(
            f"Run {result.run_id}: {result.status} · {result.turns} model calls · "
            f"{result.total_tokens} tokens\n"
        )
        print_events(await runtime.events(result.run_id))
        if kept is not None:
            click.echo(
                f"\nLook again: signoff runs show {result.run_id} --events "
                f"--database-url sqlite+aiosqlite:///{kept}"
            )
        return result


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
        return one_line(line)


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
