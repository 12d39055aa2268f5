"""``signoff hook claude-code``: Claude Code's ``PreToolUse`` command hook.

It reads the hook input on stdin, checks it, posts it to the HTTP hook route of a served
signoff (`adapters.claude_code.route`, which asks, waits and answers), and prints Claude
Code's hook JSON. A connection lost while waiting is retried with the same input: the
route finds the same approval again by the call's ``tool_use_id``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import aiohttp
import click

from adapters.claude_code.hook import (
    DEFAULT_AGENT,
    DEFAULT_TIMEOUT_SECONDS,
    ON_TIMEOUT,
    HookInputError,
    OnTimeout,
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
    type=click.FloatRange(min=0, max=3600),
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
    help="The answer when nobody decided in time: ask (Claude Code's own prompt) or deny, "
    "which withdraw the request, or defer (a headless run stops; the ticket stays open).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="With --on-timeout defer: signoff resumes the session (claude -p --resume) once "
    "the call is decided; the agent needs a resume table in the agents file.",
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
    resume: bool,
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
      signoff hook claude-code --on-timeout defer --timeout 60 --resume
    """
    if resume and on_timeout != "defer":
        return fail("bad options", "--resume goes with --on-timeout defer", EXIT_USAGE)
    raw = sys.stdin.buffer.read()
    try:
        read_pre_tool_use(raw)
    except HookInputError as exc:
        return fail("bad hook input", str(exc), EXIT_USAGE)
    query = {"agent": agent, "timeout": f"{timeout:.3f}", "on_timeout": on_timeout}
    if resume:
        query["resume"] = "1"
    if on_behalf_of is not None:
        query["on_behalf_of"] = on_behalf_of
    return _emit(asyncio.run(_ask(url, token, query, raw, timeout, give_up_after)))


_FIRST_RETRY = 0.25
_LONGEST_RETRY = 2.0
_RETRIED = frozenset({408, 425, 429, 500, 502, 503, 504})


async def _ask(
    url: str, token: str, query: dict[str, str], raw: bytes, wait: float, give_up_after: float
) -> dict[str, Any]:
    """The route's answer, asking again while signoff is unreachable (the same input finds
    the same approval), for at most `give_up_after` seconds of failures in a row."""
    target = url.rstrip("/") + "/claude-code/hook"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    ends = time.monotonic() + wait
    failing_since: float | None = None
    pause = _FIRST_RETRY
    async with aiohttp.ClientSession(trust_env=False) as session:
        while True:
            left = max(0.0, ends - time.monotonic())
            query["timeout"] = f"{left:.3f}"
            problem: str
            try:
                async with session.post(
                    target,
                    params=query,
                    data=raw,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=left + 30, connect=10),
                ) as response:
                    text = await response.text()
                    if response.status == 200:
                        answered = _answer_of(text)
                        if answered is not None:
                            return answered
                        problem = "an answer that is not Claude Code's hook JSON"
                    elif response.status in _RETRIED:
                        problem = f"HTTP {response.status}"
                    else:
                        said = _message_of(text)
                        why = f"HTTP {response.status}" + (f": {said}" if said else "")
                        _warn(f"signoff refused the request: {why}")
                        return refused_answer(why)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                problem = str(exc) or type(exc).__name__
            now = time.monotonic()
            failing_since = failing_since if failing_since is not None else now
            if now - failing_since >= give_up_after:
                _warn(f"signoff at {url} could not be reached: {problem}; answering ask")
                return unreachable_answer(problem)
            await asyncio.sleep(min(pause, give_up_after))
            pause = min(pause * 2, _LONGEST_RETRY)


def _answer_of(text: str) -> dict[str, Any] | None:
    try:
        found = json.loads(text)
    except ValueError:
        return None
    if isinstance(found, dict) and isinstance(found.get("hookSpecificOutput"), dict):
        return found
    return None


def _message_of(text: str) -> str | None:
    try:
        found = json.loads(text)
    except ValueError:
        return text.strip()[:500] or None
    if isinstance(found, dict) and isinstance(found.get("message"), str):
        return str(found["message"])
    return None
