"""Claude Code's permission prompt tool, decided in signoff: an MCP server with one tool,
``approve``, for ``claude -p --permission-prompt-tool mcp__signoff__approve``.

When a headless Claude Code run meets a tool call that its own settings neither allow nor
deny, it calls this tool with::

    {"tool_name": "Bash", "input": {"command": "git push"}, "tool_use_id": "toolu_..."}

and reads the tool's text result, JSON::

    {"behavior": "allow", "updatedInput": {...}}      the call runs with these arguments
    {"behavior": "deny", "message": "..."}             it does not; the model reads why

The call becomes the same external approval as the ``PreToolUse`` hook's
(`adapters.claude_code.hook.approval_request`), and the tool waits for its decision,
sending MCP progress notifications meanwhile when the client asked for them. Allowed:
``allow`` with the arguments to run with (an approver's edits, or the input as sent).
Denied: ``deny`` with why. Nobody decided within the wait: ``deny``, saying the ticket
stays open for a person to decide.

Calls are matched by idempotency key, scoped to the identity that asks:

- with a session (the ``CLAUDE_CODE_SESSION_ID`` Claude Code gives the stdio server it
  starts, or the ``Signoff-Session`` header over HTTP), a key of the agent, the session
  and the ``tool_use_id``: the same tool use asked again gets the same approval;
- without one, a key of the agent, the ``tool_use_id``, the tool and its input as
  canonical JSON: the same tool use asked again gets the same approval, and another call
  that happens to reuse the id gets one of its own;
- without a ``tool_use_id``, every call asks anew.

Two transports: stdio (`serve_stdio`, the ``signoff permission-prompt`` command, over the
approvals API) and Streamable HTTP on ``signoff serve`` (`add_permission_prompt_routes`,
authenticated with the API's bearer tokens; the token's identity is the requester).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import mcp_types
from aiohttp import web
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from adapters.claude_code.hook import (
    DEFAULT_AGENT,
    Answered,
    PreToolUse,
    approval_request,
    hook_answer,
)
from runtime import (
    Actor,
    ApprovalRefused,
    ApprovalRequest,
    ConfigurationError,
    IdempotencyConflict,
    InvalidApproval,
    Runtime,
)

TOOL = "approve"
"""The tool's name: ``--permission-prompt-tool mcp__<server name>__approve``."""
PATH = "/claude-code/mcp"
"""Where ``signoff serve`` serves the tool over Streamable HTTP (as
`adapters.claude_code.prompt_route.PATH`, which serves it without importing this module)."""
SESSION_HEADER = "Signoff-Session"
"""The HTTP header naming the session calls belong to (at most 200 characters)."""
SESSION_ENV = "CLAUDE_CODE_SESSION_ID"
"""The environment variable in which Claude Code gives a stdio server its session id."""
DEFAULT_TIMEOUT_SECONDS = 3600.0
"""How long a call waits for a decision before it is denied (the ticket stays open)."""
MAX_TIMEOUT_SECONDS = 86400
"""The longest wait ``?timeout=`` may ask for."""
PROGRESS_SECONDS = 10.0
"""How often a waiting call sends a progress notification (when the client gave a
``progressToken``); Claude Code gives up on an HTTP tool silent for 300 s."""
MAX_NAME = 200
"""Longest tool name, tool use id or session."""

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool_name": {"type": "string", "description": "The tool asking for permission"},
        "input": {"type": "object", "description": "The tool's input"},
        "tool_use_id": {"type": "string", "description": "The tool use's id"},
    },
    "required": ["tool_name", "input"],
}
"""The arguments Claude Code 2.1 sends the permission prompt tool."""

_ACTOR_KEY = "signoff.actor"
_OPTIONS_KEY = "signoff.prompt"
_AGENT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SECONDS = re.compile(r"\d{1,5}(\.\d{1,3})?")


class AskRefused(Exception):
    """signoff refused to ask about the call (a refused agent, a reused key ...)."""


class AskUnavailable(Exception):
    """signoff could not be reached, or gave no usable answer."""


@dataclass(frozen=True)
class Ask:
    """One approval to request.

    Attributes:
        request: The approval request.
        idempotency_key: Its key (None: asks anew).
        actor: Who asks (None where the approvals source knows: the API client's token).
    """

    request: ApprovalRequest
    idempotency_key: str | None
    actor: Actor | None


class ApprovalSource(Protocol):
    """Where approvals are requested and waited for: the runtime itself, or a served
    signoff over the approvals API."""

    async def ask(self, ask: Ask) -> Answered:
        """Request the approval; its first answer.

        Raises:
            AskRefused: signoff refused the request.
            AskUnavailable: signoff could not be reached.
        """
        ...

    async def wait(self, approval: Answered, actor: Actor | None, seconds: float) -> Answered:
        """The approval once decided, or as it stands after `seconds`.

        Raises:
            AskUnavailable: signoff could not be reached.
        """
        ...


@dataclass(frozen=True)
class Options:
    """How calls are asked.

    Attributes:
        agent: The external agent whose rules decide.
        timeout: Seconds to wait for a decision.
        on_behalf_of: The user the calls are made for (None: the asking identity).
    """

    agent: str = DEFAULT_AGENT
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    on_behalf_of: str | None = None


# -- the call and its answer -------------------------------------------------------------------
def _invalid(message: str) -> MCPError:
    return MCPError(code=mcp_types.INVALID_PARAMS, message=message)


def read_call(arguments: Mapping[str, Any] | None, session: str | None) -> PreToolUse:
    """The tool call Claude Code asks about, checked.

    Args:
        arguments: The ``approve`` tool's arguments.
        session: The session the call belongs to, if known (else ``""``).

    Raises:
        MCPError: ``INVALID_PARAMS``, naming the field that is missing or wrong.
    """
    data = dict(arguments or {})
    unknown = sorted(set(data) - set(INPUT_SCHEMA["properties"]))
    if unknown:
        raise _invalid(f"unknown argument {unknown[0]!r}")
    tool_name = data.get("tool_name")
    if not isinstance(tool_name, str) or not tool_name.strip() or len(tool_name) > MAX_NAME:
        raise _invalid(f"tool_name: a non-empty string of at most {MAX_NAME} characters")
    tool_input = data.get("input")
    if not isinstance(tool_input, Mapping):
        raise _invalid("input: a JSON object is required")
    tool_use_id = data.get("tool_use_id")
    if tool_use_id is not None and (
        not isinstance(tool_use_id, str) or not tool_use_id.strip() or len(tool_use_id) > MAX_NAME
    ):
        raise _invalid(f"tool_use_id: a non-empty string of at most {MAX_NAME} characters")
    return PreToolUse(
        session_id=session or "",
        tool_name=tool_name,
        tool_input=dict(tool_input),
        tool_use_id=tool_use_id,
    )


def prompt_key(call: PreToolUse, agent: str = DEFAULT_AGENT) -> str | None:
    """The idempotency key of `call` (see the module's docstring): the agent, the session
    and the tool use id, and without a session the tool and its canonical input too; None
    without a tool use id.

    Not the hook's own key: a hook that gave up withdraws its approval, which the prompt
    Claude Code then falls back to must not read as the answer.
    """
    if call.tool_use_id is None:
        return None
    parts: list[Any] = ["claude-code-prompt", agent, call.session_id, call.tool_use_id]
    if not call.session_id:
        parts += [call.tool_name, call.tool_input]
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def prompt_request(call: PreToolUse, options: Options) -> ApprovalRequest:
    """The approval request of `call`: the hook's, in the call's session if it has one."""
    request = approval_request(call, agent=options.agent, on_behalf_of=options.on_behalf_of)
    return request if call.session_id else replace(request, session_id=None)


def allow(updated_input: Mapping[str, Any]) -> dict[str, Any]:
    """The answer that lets the call run with `updated_input`."""
    return {"behavior": "allow", "updatedInput": dict(updated_input)}


def deny(message: str) -> dict[str, Any]:
    """The answer that refuses the call; the model reads `message`."""
    return {"behavior": "deny", "message": message}


def prompt_answer(approval: Answered, *, waited: float | None = None) -> dict[str, Any]:
    """Claude Code's answer for `approval` as it stands: ``allow`` with the arguments to
    run with, else ``deny`` with why (the ticket named when it stays open)."""
    if approval.status == "allowed":
        return allow(approval.arguments)
    if approval.status == "denied":
        hook = hook_answer(approval, waited=waited)["hookSpecificOutput"]
        return deny(str(hook["permissionDecisionReason"]))
    within = f" within {waited:g} s" if waited is not None else ""
    ticket = f"ticket {approval.ticket_id}, " if approval.ticket_id else ""
    return deny(
        f"No decision in signoff{within}; it stays open for a person to decide "
        f"({ticket}approval {approval.approval_id})"
    )


def refused(why: str) -> dict[str, Any]:
    """The answer when signoff refused to ask: ``deny`` with signoff's reason."""
    return deny(f"signoff refused to ask about this call: {why}")


def unavailable(why: str) -> dict[str, Any]:
    """The answer when signoff cannot be reached: ``deny`` (nothing runs without a yes)."""
    return deny(f"signoff could not be reached ({why}); the call was not allowed")


# -- the MCP server ----------------------------------------------------------------------------
Progress = Callable[[float, float | None, str | None], Awaitable[None]]


class PermissionPrompt:
    """The MCP server of the ``approve`` tool.

    Args:
        source: Where approvals are requested.
        options: How calls are asked when the transport says nothing (stdio).
        session: The session calls belong to when the transport names none.
        progress_seconds: How often a waiting call reports progress.
        stop: Set when the server stops: waiting calls answer as their approvals stand.
        clock: Seconds of a monotonic clock (default: the event loop's).
    """

    def __init__(
        self,
        source: ApprovalSource,
        options: Options | None = None,
        *,
        session: str | None = None,
        progress_seconds: float = PROGRESS_SECONDS,
        stop: asyncio.Event | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.source = source
        self.options = options or Options()
        self._session = session
        self._progress_seconds = progress_seconds
        self._stop = stop or asyncio.Event()
        self._clock = clock
        self.server: Server[Any] = Server(
            "signoff",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    @staticmethod
    def tool() -> mcp_types.Tool:
        """The ``approve`` tool as listed."""
        return mcp_types.Tool(
            name=TOOL,
            description="Ask signoff whether a tool call may run; waits for a person's "
            "decision where the rules ask for one.",
            input_schema=INPUT_SCHEMA,
        )

    async def _list_tools(
        self, ctx: Any, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[self.tool()])

    async def _call_tool(
        self, ctx: Any, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        if params.name != TOOL:
            raise _invalid(f"no tool {params.name!r}: this server has {TOOL!r} only")
        actor, options, session = _caller(ctx)
        call = read_call(params.arguments, session or self._session)
        answer = await self.decide(
            call, actor, options or self.options, progress=ctx.session.report_progress
        )
        text = json.dumps(answer, ensure_ascii=False)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)])

    async def decide(
        self,
        call: PreToolUse,
        actor: Actor | None,
        options: Options,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Ask about `call`, wait up to ``options.timeout`` for a decision, and answer."""
        try:
            approval = await self.source.ask(
                Ask(prompt_request(call, options), prompt_key(call, options.agent), actor)
            )
        except AskRefused as exc:
            return refused(str(exc))
        except AskUnavailable as exc:
            return unavailable(str(exc))
        clock = self._clock or asyncio.get_running_loop().time
        started = clock()
        try:
            while approval.status == "pending" and not self._stop.is_set():
                left = options.timeout - (clock() - started)
                if left <= 0:
                    break
                approval = await self.source.wait(
                    approval, actor, min(self._progress_seconds, left)
                )
                if approval.status == "pending" and progress is not None:
                    await progress(clock() - started, options.timeout, "waiting for sign-off")
        except AskUnavailable as exc:
            return unavailable(str(exc))
        return prompt_answer(approval, waited=math.floor(options.timeout * 1000) / 1000)


def _caller(ctx: Any) -> tuple[Actor | None, Options | None, str | None]:
    """Who calls, how and in which session, as the HTTP edge put them in the request's
    scope (all None over stdio)."""
    request = getattr(ctx, "request", None)
    scope: Mapping[str, Any] = getattr(request, "scope", None) or {}
    actor = scope.get(_ACTOR_KEY)
    options = scope.get(_OPTIONS_KEY)
    headers = getattr(request, "headers", None) or {}
    session = headers.get(SESSION_HEADER.lower()) or None
    return (
        actor if isinstance(actor, Actor) else None,
        options if isinstance(options, Options) else None,
        str(session)[:MAX_NAME] if session else None,
    )


async def serve_stdio(prompt: PermissionPrompt) -> None:
    """Serve `prompt` over this process's stdin and stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await prompt.server.run(read, write, prompt.server.create_initialization_options())


# -- the runtime as the approvals source -------------------------------------------------------
class RuntimeApprovals:
    """Approvals requested of the runtime in this process (``signoff serve``).

    Args:
        runtime: The runtime that decides.
        on_change: Called after a request opened an approval (wakes the worker).
        stop: Set when the server stops: long polls end.
    """

    def __init__(
        self, runtime: Runtime, on_change: Callable[[], None], stop: asyncio.Event
    ) -> None:
        self._runtime = runtime
        self._on_change = on_change
        self._stop = stop

    async def ask(self, ask: Ask) -> Answered:
        """Request the approval of `ask` as its actor."""
        if ask.actor is None:
            raise AskRefused("not authenticated")
        try:
            approval = await self._runtime.request_approval(
                ask.request, actor=ask.actor, idempotency_key=ask.idempotency_key
            )
        except (ApprovalRefused, ConfigurationError, IdempotencyConflict, InvalidApproval) as exc:
            raise AskRefused(str(exc)) from exc
        if not approval.replayed:
            self._on_change()
        return approval

    async def wait(self, approval: Answered, actor: Actor | None, seconds: float) -> Answered:
        """The approval once decided, after `seconds`, or as it stands when signoff stops."""
        if actor is None:  # pragma: no cover - ask refused it first
            return approval
        return await self._runtime.wait_approval(
            approval.approval_id, viewer=actor, timeout=seconds, stop=self._stop
        )


# -- Streamable HTTP on aiohttp ----------------------------------------------------------------
Authenticate = Callable[[web.Request], Actor | None]
"""The actor of a request's bearer token, or None."""
MayActFor = Callable[[web.Request, str], bool]
"""Whether the request's token may name this user as the requester."""


def _error(status: int, code: str, message: str) -> web.Response:
    response = web.json_response({"error": code, "message": message}, status=status)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="signoff"'
    return response


def _options(request: web.Request) -> Options | str:
    """The request's ``?agent=&timeout=&on_behalf_of=``, or why they are bad."""
    agent = request.query.get("agent") or DEFAULT_AGENT
    if not _AGENT.fullmatch(agent):
        return "agent: 1-64 letters, digits, '_', '.' or '-'"
    raw = request.query.get("timeout")
    if raw is None or raw == "":
        timeout = DEFAULT_TIMEOUT_SECONDS
    elif _SECONDS.fullmatch(raw) and float(raw) <= MAX_TIMEOUT_SECONDS:
        timeout = float(raw)
    else:
        return f"timeout must be a number of seconds from 0 to {MAX_TIMEOUT_SECONDS}"
    on_behalf_of = request.query.get("on_behalf_of") or None
    if on_behalf_of is not None and len(on_behalf_of) > MAX_NAME:
        return f"on_behalf_of is longer than {MAX_NAME} characters"
    return Options(agent=agent, timeout=timeout, on_behalf_of=on_behalf_of)


class PromptEndpoint:
    """The permission prompt tool served over Streamable HTTP: one SDK session manager,
    started with `start` and closed with `close`; `handle` answers one request.

    Args:
        runtime: The runtime that decides.
        authenticate: Who the request's bearer token is (None: refused with 401).
        may_act_for: Whether the token may ask on behalf of a user.
        on_change: Called after a call opened an approval (wakes the worker).
        progress_seconds: How often a waiting call reports progress.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        authenticate: Authenticate,
        may_act_for: MayActFor,
        on_change: Callable[[], None],
        progress_seconds: float = PROGRESS_SECONDS,
    ) -> None:
        self._stop = asyncio.Event()
        self.prompt = PermissionPrompt(
            RuntimeApprovals(runtime, on_change, self._stop),
            progress_seconds=progress_seconds,
            stop=self._stop,
        )
        self._authenticate = authenticate
        self._may_act_for = may_act_for
        self._manager = StreamableHTTPSessionManager(app=self.prompt.server)
        self._done = asyncio.Event()
        self._task: asyncio.Future[None] | None = None
        self._streams: set[asyncio.Event] = set()

    async def start(self) -> None:
        """Start the SDK's session manager."""
        ready = asyncio.Event()

        async def run_manager() -> None:
            async with self._manager.run():
                ready.set()
                await self._done.wait()

        self._task = asyncio.ensure_future(run_manager())
        await ready.wait()

    def stop_waiting(self) -> None:
        """Answer the calls that wait, and end the clients' open streams."""
        self._stop.set()
        # A client's standalone stream (GET) stays open as long as the client runs: ended
        # here, as if the client went away, it does not hold up the shutdown.
        for hangup in list(self._streams):
            hangup.set()

    async def close(self) -> None:
        """Close the session manager."""
        self._done.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one request (GET, POST or DELETE)."""
        actor = self._authenticate(request)
        if actor is None:
            return _error(401, "unauthenticated", "a valid bearer token is required")
        options = _options(request)
        if isinstance(options, str):
            return _error(400, "bad_request", options)
        if options.on_behalf_of is not None and not self._may_act_for(
            request, options.on_behalf_of
        ):
            return _error(
                403, "forbidden", f"this token may not ask on behalf of {options.on_behalf_of!r}"
            )
        hangup = asyncio.Event()
        if request.method == "GET":
            self._streams.add(hangup)
        try:
            extra = {_ACTOR_KEY: actor, _OPTIONS_KEY: options}
            return await _asgi(request, self._manager, extra, hangup)
        finally:
            self._streams.discard(hangup)


def add_permission_prompt_routes(
    app: web.Application,
    runtime: Runtime,
    *,
    authenticate: Authenticate,
    may_act_for: MayActFor,
    on_change: Callable[[], None],
    path: str = PATH,
    progress_seconds: float = PROGRESS_SECONDS,
) -> PermissionPrompt:
    """Serve the permission prompt tool over Streamable HTTP at `path` of `app`.

    ``?agent=`` (default ``claude-code``), ``?timeout=`` (seconds, 0 to 86400, default
    3600) and ``?on_behalf_of=`` set how calls are asked. Every request needs a valid
    bearer token (401 otherwise) whose identity asks; bad options are 400, an
    ``on_behalf_of`` the token may not name 403, all before the SDK sees the request.
    (`adapters.claude_code.prompt_route` serves the same, starting it at the first
    request.)

    Args:
        app: The application to extend.
        runtime: The runtime that decides.
        authenticate: Who the request's bearer token is (None: refused with 401).
        may_act_for: Whether the token may ask on behalf of a user.
        on_change: Called after a call opened an approval (wakes the worker).
        path: Where to serve.
        progress_seconds: How often a waiting call reports progress.

    Returns:
        The served prompt.
    """
    endpoint = PromptEndpoint(
        runtime,
        authenticate=authenticate,
        may_act_for=may_act_for,
        on_change=on_change,
        progress_seconds=progress_seconds,
    )

    async def lifetime(_app: web.Application) -> Any:
        await endpoint.start()
        yield
        await endpoint.close()

    async def stop_waiting(_app: web.Application) -> None:
        endpoint.stop_waiting()

    app.cleanup_ctx.append(lifetime)
    app.on_shutdown.append(stop_waiting)
    for method in ("GET", "POST", "DELETE"):
        app.router.add_route(method, path, endpoint.handle)
    return endpoint.prompt


async def _asgi(
    request: web.Request,
    manager: StreamableHTTPSessionManager,
    extra: Mapping[str, Any],
    hangup: asyncio.Event,
) -> web.StreamResponse:
    """Hand one aiohttp request to the SDK's ASGI handler and stream its answer back; the
    SDK reads the client as gone once the request ended or `hangup` is set."""
    body = await request.read()
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.encode(),
        "root_path": "",
        "query_string": request.query_string.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in request.headers.items()],
        "client": (request.remote or "", 0),
        "server": ("signoff", 0),
        **extra,
    }
    sent_body = False
    response: web.StreamResponse | None = None

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await hangup.wait()
        return {"type": "http.disconnect"}

    async def send(message: Mapping[str, Any]) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=int(message["status"]))
            for key, value in message.get("headers") or ():
                name = key.decode("latin-1")
                if name.lower() in ("content-length", "transfer-encoding"):
                    continue
                response.headers.add(name, value.decode("latin-1"))
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            data = message.get("body") or b""
            if data:
                await response.write(data)
            if not message.get("more_body"):
                await response.write_eof()

    try:
        await manager.handle_request(scope, receive, send)
    finally:
        hangup.set()
    if response is None:
        return web.Response(status=500)
    return response


__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "INPUT_SCHEMA",
    "MAX_TIMEOUT_SECONDS",
    "PATH",
    "PROGRESS_SECONDS",
    "SESSION_ENV",
    "SESSION_HEADER",
    "TOOL",
    "ApprovalSource",
    "Ask",
    "AskRefused",
    "AskUnavailable",
    "Options",
    "PermissionPrompt",
    "RuntimeApprovals",
    "add_permission_prompt_routes",
    "allow",
    "deny",
    "prompt_answer",
    "prompt_key",
    "prompt_request",
    "read_call",
    "refused",
    "serve_stdio",
]
