"""The root command, its subcommands and the entry point that maps errors to exit codes."""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import click

from bot.cli._agents import agents
from bot.cli._audit import audit, prune
from bot.cli._control import cancel, pause, recover, resume
from bot.cli._decide import answer, approve, batch, deny, resolve
from bot.cli._demo import demo
from bot.cli._exits import (
    ERROR_MAP,
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    HINTS,
)
from bot.cli._grants import grants
from bot.cli._hook import hook
from bot.cli._mcp import mcp
from bot.cli._options import State
from bot.cli._output import fail
from bot.cli._policy import policy
from bot.cli._prompt import permission_prompt
from bot.cli._runs import runs
from bot.cli._serve import migrate, serve
from bot.cli._tickets import tickets
from runtime import SignoffError

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
    (see docs/settings.md), e.g. SIGNOFF_DATABASE_URL and SIGNOFF_APP.

    \b
    Examples:
      signoff demo                      # a scripted agent end to end, in the terminal
      signoff tickets                   # what waits for a decision
      signoff approve tk_3f9a... --as U024BE7LH
      signoff runs show run_8c1d... --events
    """
    ctx.obj = State(config)


for _command in (
    demo,
    runs,
    tickets,
    approve,
    deny,
    answer,
    resolve,
    resume,
    pause,
    cancel,
    recover,
    serve,
    migrate,
    agents,
    grants,
    batch,
    hook,
    permission_prompt,
    mcp,
    audit,
    prune,
    policy,
):
    cli.add_command(_command)


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
        return fail("usage", exc.format_message() + where, EXIT_USAGE)
    except click.ClickException as exc:
        return fail("error", exc.format_message(), exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        return fail("interrupted", "stopped before finishing", EXIT_INTERRUPTED)
    except SignoffError as exc:
        for kind, code, label in ERROR_MAP:
            if isinstance(exc, kind):
                hint = HINTS.get(kind)
                return fail(label, f"{exc} ({hint})" if hint else str(exc), code)
        return fail("error", str(exc), EXIT_INTERNAL)  # pragma: no cover - SignoffError is last
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            traceback.print_exc()
            hint = ""
        else:
            hint = " (set SIGNOFF_LOG_LEVEL=DEBUG for a traceback)"
        return fail("internal error", f"{type(exc).__name__}: {exc}{hint}", EXIT_INTERNAL)
    return outcome if isinstance(outcome, int) else EXIT_OK


def main() -> None:
    """The ``signoff`` console script."""
    sys.exit(run())
