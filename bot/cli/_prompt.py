"""``signoff permission-prompt``: Claude Code's permission prompt tool over stdio.

An MCP server with the one tool ``approve`` (`adapters.claude_code.permission_prompt`),
for ``claude -p --permission-prompt-tool mcp__signoff__approve``; it asks a served signoff
over the approvals API (with the client, `adapters.client`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import click

from adapters.claude_code.hook import DEFAULT_AGENT
from bot.cli._exits import EXIT_OK

if TYPE_CHECKING:
    from adapters.claude_code.hook import Answered
    from adapters.claude_code.permission_prompt import Ask, Options
    from adapters.client import AsyncSignoffClient, Decision
    from runtime import Actor

# As `adapters.claude_code.permission_prompt` has them: that module needs the mcp extra,
# which only this command's run imports.
DEFAULT_TIMEOUT_SECONDS = 3600.0
SESSION_ENV = "CLAUDE_CODE_SESSION_ID"


class ClientApprovals:
    """Approvals requested of a served signoff over the approvals API, as the client's
    token."""

    def __init__(self, client: AsyncSignoffClient) -> None:
        self._client = client

    async def ask(self, ask: Ask) -> Decision:
        """Request the approval of `ask`; signoff's first answer."""
        from adapters.claude_code.permission_prompt import AskRefused, AskUnavailable
        from adapters.client import ApprovalError, ApprovalRequestError

        request = ask.request
        try:
            return await self._client.request_approval(
                agent=request.agent,
                tool=request.tool,
                arguments=request.arguments,
                session_id=request.session_id,
                description=request.description,
                on_behalf_of=request.on_behalf_of,
                idempotency_key=ask.idempotency_key,
                wait=False,
            )
        except ApprovalRequestError as exc:
            raise AskRefused(str(exc)) from exc
        except ApprovalError as exc:
            raise AskUnavailable(str(exc)) from exc

    async def wait(self, approval: Answered, actor: Actor | None, seconds: float) -> Decision:
        """The approval once decided, or as it stands after `seconds`."""
        from adapters.claude_code.permission_prompt import AskUnavailable
        from adapters.client import ApprovalError

        try:
            return await self._client.wait(approval.approval_id, timeout=seconds)
        except ApprovalError as exc:
            raise AskUnavailable(str(exc)) from exc


@click.command("permission-prompt", short_help="Claude Code's permission prompt tool, on stdio.")
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
    help="How long a call waits for a decision before it is denied (the ticket stays open).",
)
@click.option(
    "--on-behalf-of",
    metavar="USER",
    help="The user the calls are made for (the requester); the token must be allowed to name them.",
)
@click.option(
    "--session",
    envvar=SESSION_ENV,
    metavar="ID",
    help=f"Claude Code's session id (default: {SESSION_ENV}, which Claude Code sets for "
    "the servers it starts); calls are matched by it and the tool use id.",
)
@click.option(
    "--give-up-after",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="How long signoff may stay unreachable before a call is denied.",
)
def permission_prompt(
    url: str,
    token: str,
    agent: str,
    timeout: float,
    on_behalf_of: str | None,
    session: str | None,
    give_up_after: float,
) -> int:
    """Claude Code's permission prompt tool (an MCP server on stdio), decided in signoff.

    Serves the tool "approve" to the Claude Code that starts it (--mcp-config); with
    --permission-prompt-tool mcp__signoff__approve, a headless run asks it about each
    call its settings do not decide. The call becomes an approval of AGENT: allowed (with
    an approver's changed arguments, if any), denied with the reason, or denied when
    nobody decided within --timeout (the ticket stays open).

    \b
    Examples:
      claude -p "..." --mcp-config signoff-mcp.json \\
          --permission-prompt-tool mcp__signoff__approve
      SIGNOFF_URL=http://127.0.0.1:8080 SIGNOFF_TOKEN=... signoff permission-prompt
    """
    from adapters.claude_code.permission_prompt import Options

    options = Options(agent=agent, timeout=timeout, on_behalf_of=on_behalf_of)
    asyncio.run(_serve(url, token, options, session or None, give_up_after))
    return EXIT_OK


async def _serve(
    url: str, token: str, options: Options, session: str | None, give_up_after: float
) -> None:
    from adapters.claude_code.permission_prompt import PermissionPrompt, serve_stdio
    from adapters.client import AsyncSignoffClient, RetryPolicy

    retry = RetryPolicy(give_up_after=give_up_after, max_delay=2.0)
    async with AsyncSignoffClient(url, token, retry=retry) as client:
        prompt = PermissionPrompt(ClientApprovals(client), options, session=session)
        await serve_stdio(prompt)
