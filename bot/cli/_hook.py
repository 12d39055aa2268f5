"""``signoff hook claude-code``: Claude Code's ``PreToolUse`` command hook.

It reads the hook input on stdin, asks a served signoff over the approvals API (with the
client, `adapters.client`), waits for a decision and prints Claude Code's hook JSON; the
mapping is `adapters.claude_code.hook`, shared with the HTTP hook route.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from adapters.claude_code.hook import (
    DEFAULT_AGENT,
    DEFAULT_TIMEOUT_SECONDS,
    ON_TIMEOUT,
    HookInputError,
    OnTimeout,
    approval_request,
    hook_answer,
    idempotency_key,
    read_pre_tool_use,
    refused_answer,
    unreachable_answer,
)
from bot.cli._exits import EXIT_OK, EXIT_USAGE
from bot.cli._output import fail, one_line


@click.group(short_help="Permission hooks of coding agents (Claude Code).")
def hook() -> None:
    """Hooks that coding agents run before a tool call, answered by signoff.

    \b
    Examples:
      signoff hook claude-code < pre_tool_use.json
    """


def _emit(answer: dict[str, Any]) -> int:
    click.echo(json.dumps(answer, ensure_ascii=False))
    return EXIT_OK


def _warn(message: str) -> None:
    click.echo(f"signoff: {one_line(message)}", err=True)


@hook.command("claude-code")
@click.option(
    "--url",
    envvar="SIGNOFF_URL",
    required=True,
    metavar="URL",
    help="Where signoff serves (also SIGNOFF_URL), e.g. http://127.0.0.1:8080.",
)
@click.option(
    "--token",
    envvar="SIGNOFF_TOKEN",
    required=True,
    metavar="TOKEN",
    help="An API token of SIGNOFF_API_TOKENS (also SIGNOFF_TOKEN).",
)
@click.option(
    "--agent",
    default=DEFAULT_AGENT,
    show_default=True,
    metavar="NAME",
    help="The external agent of the agents file whose rules decide.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=DEFAULT_TIMEOUT_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for a decision; keep it below the hook's timeout in Claude "
    "Code's settings (600 s by default).",
)
@click.option(
    "--on-timeout",
    type=click.Choice(ON_TIMEOUT),
    default="ask",
    show_default=True,
    help="The answer when nobody decided in time: ask (Claude Code's own prompt), defer "
    "(a headless run stops and is resumed later) or deny. The ticket stays open.",
)
@click.option(
    "--on-behalf-of",
    metavar="USER",
    help="The user the calls are made for (the requester); the token must be allowed to name them.",
)
@click.option(
    "--give-up-after",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="How long signoff may stay unreachable before the hook answers ask.",
)
def claude_code(
    url: str,
    token: str,
    agent: str,
    timeout: float,
    on_timeout: OnTimeout,
    on_behalf_of: str | None,
    give_up_after: float,
) -> int:
    """Answer Claude Code's PreToolUse hook from signoff.

    Reads the hook input (JSON) on stdin, asks signoff whether the tool call may run
    under AGENT's rules, waits up to --timeout for a person's decision and prints
    Claude Code's answer: allow (with the changed arguments when an approver edited
    them), deny with the reason, or --on-timeout. A retried hook for the same tool use
    gets the same approval, never a second card.

    Exit 0 with the answer on stdout; when signoff cannot be reached the answer is ask
    (and a message on stderr). Input that is not a PreToolUse hook exits 2 (Claude Code
    then blocks the call) and asks nothing.

    \b
    Examples:
      SIGNOFF_URL=http://127.0.0.1:8080 SIGNOFF_TOKEN=... signoff hook claude-code
      signoff hook claude-code --on-timeout defer --timeout 300
    """
    from adapters.client import (
        ApprovalError,
        ApprovalRequestError,
        RetryPolicy,
        SignoffClient,
        SignoffUnavailable,
    )

    try:
        call = read_pre_tool_use(sys.stdin.buffer.read())
    except HookInputError as exc:
        return fail("bad hook input", str(exc), EXIT_USAGE)
    request = approval_request(call, agent=agent, on_behalf_of=on_behalf_of)
    retry = RetryPolicy(give_up_after=give_up_after, max_delay=2.0)
    try:
        with SignoffClient(url, token, retry=retry) as client:
            decision = client.request_approval(
                agent=request.agent,
                tool=request.tool,
                arguments=request.arguments,
                session_id=request.session_id,
                description=request.description,
                on_behalf_of=request.on_behalf_of,
                idempotency_key=idempotency_key(call, agent),
                wait=timeout,
            )
    except ApprovalRequestError as exc:
        _warn(f"signoff refused the request: {exc}")
        return _emit(refused_answer(str(exc)))
    except SignoffUnavailable as exc:
        _warn(f"signoff at {url} could not be reached: {exc}; answering ask")
        return _emit(unreachable_answer(str(exc)))
    except ApprovalError as exc:
        _warn(f"signoff at {url} gave no usable answer: {exc}; answering ask")
        return _emit(unreachable_answer(str(exc)))
    return _emit(hook_answer(decision, on_timeout=on_timeout, waited=timeout))
