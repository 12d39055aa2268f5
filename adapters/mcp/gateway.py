"""The MCP gateway: signoff serves the tools of an agent's MCP servers to any MCP client,
behind the same per-tool rules.

A gateway call is an external approval (`runtime.Runtime.request_approval`) of a
*gateway agent*: an `ExternalAgent` whose tools are the real MCP tools of a *source*
agent (the agents-file agent whose servers the `McpHub` connected, with their prefixes
and rules), not authorising ones. So a call a rule, a grant or a person allows (with
edits, maybe) is dispatched by the runtime itself as for its own MCP tools: dispatch
recorded first, the execution key in ``_meta``, the tool's replay policy, the result
recorded, an uncertain ticket if the server dies mid-call. The gateway answers the MCP
``tools/call`` with the recorded result, or with a tool error result (``isError``)
carrying why the call did not run.

Calls are matched by the approval's idempotency key: a digest of the session key, the
tool's name and the arguments as canonical JSON, scoped to the calling identity. The
session key is the ``Signoff-Session`` header when the client sends one, else the MCP
session id. The same call again in the same session gets the first call's approval and
outcome: no second card, no second execution.

Over Streamable HTTP (`add_gateway_routes`), every request is authenticated with a
bearer token before the SDK sees it; the token's identity is the requester.

An upstream server's elicitation during a call (a server with ``elicitation = true``) is
forwarded to the calling client when it declared the elicitation capability, and the
client's answer goes back to the server; otherwise the server gets ``cancel``
(`adapters.mcp.elicitation.forwarding`). On protocol 2026-07-28 and later the call answers
an ``InputRequiredResult`` with the question while the call goes on; the client's retry
with the answer gets the server's answer to it and waits for the call's outcome. Before
it, the question is an ``elicitation/create`` request to the client. A question the client
leaves unanswered for ``question_seconds`` (`QUESTION_SECONDS`) gets the server ``cancel``.

Gateway agents are ``internal``: the edges neither offer them nor start them by hand
(only a call opens a gateway run); their runs and tickets are listed and decided as any.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types
from aiohttp import web
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from adapters.mcp.elicitation import Forward, forwarding
from adapters.mcp.images import content_blocks
from runtime import (
    Actor,
    Agent,
    Approval,
    ApprovalRequest,
    ConfigurationError,
    ExternalAgent,
    Model,
    ModelRequest,
    ModelResponse,
    Permission,
    Runtime,
    SignoffError,
    Tool,
)

SESSION_HEADER = "Signoff-Session"
"""The header naming a client's session key (at most 200 characters); without it, calls
are matched within the MCP session."""

PROGRESS_SECONDS = 10.0
"""How often a waiting call sends a progress notification (when the client gave a
``progressToken``)."""

QUESTION_SECONDS = 300.0
"""How long an upstream server's question waits for the calling client's answer (its retry
with the answer on protocol 2026-07-28, its answer to ``elicitation/create`` before) until
the server gets ``cancel``."""

log = logging.getLogger("signoff.mcp")

_ACTOR_KEY = "signoff.actor"
_FIRST_POLL = 0.05
_LONGEST_POLL = 1.0
_ENDED = ("tool_completed", "tool_failed", "tool_uncertain")
_RAN = "Ran: "
_STOPPING = "signoff is stopping"
_AGAIN = "; call again in the same session for its outcome"


class GatewayCatalog(dict[str, Tool]):
    """A gateway agent's tools: the source agent's tools, looked up at each call (the hub
    replaces them when a server lists its tools again)."""

    def __init__(self, source: Agent) -> None:
        super().__init__()
        self._source = source

    def get(self, name: str, default: Any = None) -> Any:
        found = self._source.tools.get(name) if isinstance(name, str) else None
        return found if isinstance(found, Tool) else default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __getitem__(self, name: str) -> Tool:
        found = self.get(name)
        if not isinstance(found, Tool):
            raise KeyError(name)
        return found


class GatewayModel:
    """The external agents' built-in model, ending a gateway run with what the tool
    returned (the built-in one reads any result other than an authorisation as a refusal)."""

    def __init__(self, inner: Model) -> None:
        self._inner = inner
        self.name = getattr(inner, "name", "signoff:external")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Propose the requested call, then end the run with its result."""
        response = await self._inner.complete(request)
        text = response.text or ""
        if not response.tool_calls and text.startswith("Not authorised: "):
            return ModelResponse(text=_RAN + text.removeprefix("Not authorised: "))
        return response


def gateway_agent(source: Agent, name: str | None = None, **options: Any) -> ExternalAgent:
    """The external agent whose approvals run `source`'s MCP tools.

    Args:
        source: The agent whose catalog the hub fills with MCP tools.
        name: The gateway agent's name (default: ``<source>.mcp``); register it with the
            runtime like any agent, in every process that may resume its calls.
        options: More `ExternalAgent` options (approvers, deadline, approvals ...).
    """
    agent = ExternalAgent(
        name or f"{source.name}.mcp",
        description=options.pop("description", f"MCP gateway to the tools of {source.name}"),
        **options,
    )
    agent.tools = GatewayCatalog(source)
    if not isinstance(agent.model, str):
        agent.model = GatewayModel(agent.model)
    _started_by_gateway(agent)
    return agent


def serve_as_gateway(agent: ExternalAgent, source: Agent) -> ExternalAgent:
    """Make `agent` (an external agent declared elsewhere, with where its cards go and its
    defaults) the gateway agent of `source`'s MCP tools, in place; returns it."""
    if not isinstance(agent.tools, GatewayCatalog):
        agent.tools = GatewayCatalog(source)
    if not isinstance(agent.model, GatewayModel | str):
        agent.model = GatewayModel(agent.model)
    _started_by_gateway(agent)
    return agent


def _started_by_gateway(agent: ExternalAgent) -> None:
    """Mark `agent` as started by signoff itself: only the gateway opens its runs (one per
    call). The edges read ``internal`` to leave it out of the agents people may start and to
    refuse starting it by hand; its runs and tickets stay listed and decidable."""
    # Per instance: a declared external agent becomes a gateway agent in place.
    vars(agent)["internal"] = True


def call_key(session: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """The idempotency key of a gateway call: session, tool and canonical arguments."""
    canonical = json.dumps(
        [session, tool, arguments], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return "mcp:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class _Question:
    """An upstream server's question to the calling client, awaiting its answer."""

    id: str
    message: str
    schema: dict[str, Any]
    answer: asyncio.Future[mcp_types.ElicitResult]


def _denies(tool: Tool) -> bool:
    return tool.permission is Permission.DENY


class McpGateway:
    """Serves the gateway agent's tools over MCP.

    Args:
        runtime: The runtime that asks and dispatches.
        agent: The gateway agent (`gateway_agent`).
        source: Its source agent.
        on_change: Called after a call opened an approval (wakes the worker).
        progress_seconds: How often a waiting call reports progress.
        question_seconds: How long an upstream server's question waits for the calling
            client's answer; then the server gets ``cancel`` (more than 0).
        actor: Who calls when the transport names nobody (stdio: the command's user).
        session: The session key when the client's request gives none (stdio).
        drive: Drive an allowed call's run in this process when no worker took it (a
            process without a worker, as ``signoff mcp``).
    """

    def __init__(
        self,
        runtime: Runtime,
        agent: ExternalAgent,
        source: Agent,
        on_change: Callable[[], None] = lambda: None,
        *,
        progress_seconds: float = PROGRESS_SECONDS,
        question_seconds: float = QUESTION_SECONDS,
        actor: Actor | None = None,
        session: str | None = None,
        drive: bool = False,
    ) -> None:
        if not question_seconds > 0:
            raise ConfigurationError(
                f"question_seconds must be more than 0 seconds; got {question_seconds!r}"
            )
        self.runtime = runtime
        self._actor = actor
        self._session = session
        self._drive = drive
        self.agent = agent
        self.source = source
        self._on_change = on_change
        self._progress_seconds = progress_seconds
        self._question_seconds = question_seconds
        self._stopping = asyncio.Event()
        # Calls whose client answers questions by retrying (2026-07-28): by call key.
        self._calls: dict[str, asyncio.Task[mcp_types.CallToolResult]] = {}
        self._questions: dict[str, _Question] = {}
        self._asked: dict[str, asyncio.Event] = {}
        self._progress: dict[str, Callable[..., Awaitable[None]]] = {}
        self.server: Server[Any] = Server(
            "signoff",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    def stop(self) -> None:
        """End the calls waiting in this process (the server is stopping): each answers
        that it goes on waiting and that the same call again finds it."""
        self._stopping.set()

    # -- MCP handlers ----------------------------------------------------------------------
    def listed(self) -> list[mcp_types.Tool]:
        """The tools a client is offered: the source's, except those a rule denies."""
        shown = []
        for name, tool in sorted(self.source.tools.items()):
            if name in self.source.hidden or _denies(tool):
                continue
            shown.append(
                mcp_types.Tool(
                    name=name, description=tool.description or None, input_schema=tool.parameters
                )
            )
        return shown

    async def _list_tools(
        self, ctx: Any, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=self.listed())

    async def _call_tool(
        self, ctx: Any, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        actor, session = _caller(ctx)
        actor = actor or self._actor
        session = session or self._session or ""
        if actor is None:
            return _error("not authenticated")
        if _asks_by_retry(ctx):
            return await self._call_answering(ctx, actor, session, params)
        return await self.call(
            actor,
            session,
            params.name,
            dict(params.arguments or {}),
            progress=ctx.session.report_progress,
            forward=_client_forward(ctx, self._question_seconds),
        )

    async def _call_answering(
        self, ctx: Any, actor: Actor, session: str, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        """A call of a client that answers questions by retrying the call (2026-07-28):
        the call runs in a task of its own; a question ends this request with an
        ``InputRequiredResult``, and the retry carrying the answer waits on."""
        arguments = dict(params.arguments or {})
        key = call_key(session, params.name, arguments)
        asked = self._questions.get(key)
        answered = (params.input_responses or {}).get(asked.id) if asked is not None else None
        done = asked is None or asked.answer.done()
        if asked is not None and not done and isinstance(answered, mcp_types.ElicitResult):
            asked.answer.set_result(answered)
        self._progress[key] = ctx.session.report_progress
        task = self._calls.get(key)
        if task is None:
            task = asyncio.ensure_future(
                self.call(
                    actor,
                    session,
                    params.name,
                    arguments,
                    progress=self._reporter(key),
                    forward=self._asker(key),
                )
            )
            self._calls[key] = task
            task.add_done_callback(lambda done: self._ended(key, done))
        event = self._asked.setdefault(key, asyncio.Event())
        while True:
            event.clear()
            question = self._questions.get(key)
            if question is not None and not question.answer.done():
                request = mcp_types.ElicitRequest(
                    params=mcp_types.ElicitRequestFormParams(
                        message=question.message, requested_schema=question.schema
                    )
                )
                return mcp_types.InputRequiredResult(input_requests={question.id: request})
            waiting = asyncio.ensure_future(event.wait())
            try:
                await asyncio.wait((task, waiting), return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
            if task.done():
                return task.result()

    def _ended(self, key: str, task: asyncio.Task[mcp_types.CallToolResult]) -> None:
        if self._calls.get(key) is task:
            del self._calls[key]
            self._asked.pop(key, None)
            self._progress.pop(key, None)

    def _asker(self, key: str) -> Forward:
        async def ask(message: str, schema: dict[str, Any]) -> mcp_types.ElicitResult:
            question = _Question(
                secrets.token_hex(8), message, schema, asyncio.get_running_loop().create_future()
            )
            self._questions[key] = question
            self._asked.setdefault(key, asyncio.Event()).set()
            try:
                # A client that never retries would hold the upstream call until its own
                # timeout: the server gets cancel instead. A later retry finds the call's
                # outcome (the same call key).
                return await asyncio.wait_for(question.answer, self._question_seconds)
            except TimeoutError:
                _unanswered(self._question_seconds)
                return mcp_types.ElicitResult(action="cancel")
            finally:
                if self._questions.get(key) is question:
                    del self._questions[key]

        return ask

    def _reporter(self, key: str) -> Callable[..., Awaitable[None]]:
        async def report(*args: Any) -> None:
            current = self._progress.get(key)
            if current is not None:
                with contextlib.suppress(Exception):  # that request has ended
                    await current(*args)

        return report

    # -- one call --------------------------------------------------------------------------
    async def call(
        self,
        actor: Actor,
        session: str,
        tool: str,
        arguments: dict[str, Any],
        progress: Callable[..., Awaitable[None]] | None = None,
        forward: Forward | None = None,
    ) -> mcp_types.CallToolResult:
        """Ask for one call and answer with its result once it ran or was refused; the
        servers' elicitations during it go to `forward` (the calling client), if given."""
        if forward is None:
            return await self._call(actor, session, tool, arguments, progress, None)
        with forwarding(forward) as also:
            return await self._call(actor, session, tool, arguments, progress, also)

    async def _call(
        self,
        actor: Actor,
        session: str,
        tool: str,
        arguments: dict[str, Any],
        progress: Callable[..., Awaitable[None]] | None,
        forwarded: Callable[[str], None] | None,
    ) -> mcp_types.CallToolResult:
        request = ApprovalRequest(
            agent=self.agent.name, tool=tool, arguments=arguments, session_id=session or None
        )
        try:
            approval = await self.runtime.request_approval(
                request, actor=actor, idempotency_key=call_key(session, tool, arguments)
            )
        except SignoffError as exc:
            return _error(str(exc))
        if forwarded is not None:  # a worker of this process may dispatch it later
            forwarded(approval.approval_id)
        if not approval.replayed and approval.status == "pending" and approval.ticket_id is None:
            # Asking drives the run at once: only a run still queued needs the worker.
            self._on_change()
        waited = 0.0
        while approval.status == "pending":
            if self._stopping.is_set():
                return _error(_STOPPING + "; the call still waits for sign-off" + _AGAIN)
            approval = await self.runtime.wait_approval(
                approval.approval_id,
                viewer=actor,
                timeout=self._progress_seconds,
                stop=self._stopping,
            )
            waited += self._progress_seconds
            if approval.status == "pending" and progress is not None:
                await progress(waited, None, "waiting for sign-off")
        if approval.status == "denied":
            # An approval reads as denied once its call failed or became uncertain; a
            # call that was dispatched ran (or may have): its outcome is the answer.
            events = await self.runtime.events(approval.approval_id, viewer=actor)
            if not any(e["kind"] == "tool_dispatched" for e in events):
                return _error(f"Not allowed: {approval.reason or 'denied'}")
        return await self._outcome(approval, actor)

    async def _outcome(self, approval: Approval, actor: Actor) -> mcp_types.CallToolResult:
        """The allowed call's recorded result, once the runtime dispatched it."""
        pause = _FIRST_POLL
        while True:
            events = await self.runtime.events(approval.approval_id, viewer=actor)
            settled = _settled(events)
            if isinstance(settled, mcp_types.CallToolResult):
                return settled
            run = await self.runtime.get(approval.approval_id, viewer=actor)
            if run.status.finished:
                if settled == "resolve":
                    return _resolved(run.text)
                return _error(f"The call did not run: {run.error or 'ended'}")
            if self._stopping.is_set():
                return _error(_STOPPING + "; the call was allowed" + _AGAIN)
            if self._drive and await self.runtime.drive(approval.approval_id):
                continue
            await asyncio.sleep(pause)
            pause = min(pause * 2, _LONGEST_POLL)


def _settled(events: Sequence[Mapping[str, Any]]) -> mcp_types.CallToolResult | str | None:
    """What became of the call by its run's events: its result; ``resolve`` when a person
    recorded the result of an uncertain call (the run's end carries it); None while it
    runs (again, after a person accepted a retry)."""
    ended: Mapping[str, Any] | None = None
    resolved: str | None = None
    for event in events:
        if event["kind"] in _ENDED:
            ended, resolved = event, None
        elif event["kind"] == "ticket_decided" and ended is not None:
            if ended["kind"] != "tool_uncertain":
                continue
            data = event.get("data") or {}
            match data.get("decision"):
                case "retry":
                    ended = None
                case "resolve":
                    ended, resolved = None, "resolve"
                case "abort":
                    reason = data.get("reason") or "aborted by a person"
                    return _error(f"Aborted: {reason}")
                case _:
                    pass
    if ended is not None:
        return _result(ended)
    return resolved


def _resolved(text: str | None) -> mcp_types.CallToolResult:
    """The result a person recorded for an uncertain call, from its run's final answer."""
    value = (text or "").removeprefix(_RAN)
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=value)])


def _result(event: Mapping[str, Any]) -> mcp_types.CallToolResult:
    data = event.get("data") or {}
    if event["kind"] == "tool_completed":
        value = data.get("result")
        blocks = content_blocks(value)
        if blocks is not None:
            return mcp_types.CallToolResult(content=blocks)
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)])
    if event["kind"] == "tool_failed":
        return _error(str(data.get("error") or "the tool failed"))
    return _error(
        "The call's outcome is uncertain: it may or may not have run; a person resolves it"
        f" ({data.get('reason') or 'the server did not answer'})"
    )


def _error(text: str) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)], is_error=True)


def _elicits(ctx: Any) -> bool:
    """Whether the calling client declared the elicitation capability."""
    wanted = mcp_types.ClientCapabilities(elicitation=mcp_types.ElicitationCapability())
    return bool(ctx.session.check_client_capability(wanted))


def _asks_by_retry(ctx: Any) -> bool:
    """Whether the client elicits by retrying the call (2026-07-28 and later)."""
    version = getattr(ctx, "protocol_version", None)
    return version in MODERN_PROTOCOL_VERSIONS and _elicits(ctx)


def _unanswered(seconds: float) -> None:
    log.warning(
        "an MCP client left an upstream server's question unanswered for %gs: cancel", seconds
    )


def _client_forward(ctx: Any, seconds: float) -> Forward | None:
    """Asks the calling client for input, when it declared the elicitation capability;
    `seconds` bounds the wait for its answer."""
    session = ctx.session
    if not _elicits(ctx):
        return None
    request_id = getattr(ctx, "request_id", None)

    async def forward(message: str, schema: dict[str, Any]) -> mcp_types.ElicitResult:
        try:
            answer: mcp_types.ElicitResult = await asyncio.wait_for(
                session.elicit_form(message, schema, related_request_id=request_id), seconds
            )
        except TimeoutError:
            _unanswered(seconds)
            return mcp_types.ElicitResult(action="cancel")
        except Exception as exc:  # the client went away, or has no way back: cancel
            log.warning("an MCP client did not answer an elicitation: %s", exc)
            return mcp_types.ElicitResult(action="cancel")
        return answer

    return forward


def _caller(ctx: Any) -> tuple[Actor | None, str]:
    """Who calls (as the HTTP edge authenticated them) and their session key."""
    request = getattr(ctx, "request", None)
    scope: Mapping[str, Any] = getattr(request, "scope", None) or {}
    actor = scope.get(_ACTOR_KEY)
    headers = getattr(request, "headers", None) or {}
    session = headers.get(SESSION_HEADER.lower()) or headers.get("mcp-session-id") or ""
    return (actor if isinstance(actor, Actor) else None), str(session)[:200]


async def serve_stdio(gateway: McpGateway) -> None:
    """Serve `gateway` over this process's stdin and stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await gateway.server.run(read, write, gateway.server.create_initialization_options())


# -- Streamable HTTP on aiohttp ---------------------------------------------------------------
def add_gateway_routes(
    app: web.Application,
    gateway: McpGateway,
    authenticate: Callable[[web.Request], Actor | None],
    path: str = "/mcp",
) -> None:
    """Serve `gateway` over Streamable HTTP at `path` of `app` (GET, POST, DELETE).

    Every request needs a valid bearer token (401 otherwise, before the SDK sees it).
    """
    manager = StreamableHTTPSessionManager(app=gateway.server)
    ready = asyncio.Event()
    stop = asyncio.Event()

    async def run_manager() -> None:
        async with manager.run():
            ready.set()
            await stop.wait()

    async def lifetime(_app: web.Application) -> Any:
        task = asyncio.ensure_future(run_manager())
        await ready.wait()
        yield
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(lifetime)

    streams: set[asyncio.Event] = set()

    async def stop_waiting(_app: web.Application) -> None:
        gateway.stop()
        # A client's standalone stream (GET) stays open as long as the client runs: ended
        # here, as if the client went away, it does not hold up the shutdown.
        for hangup in list(streams):
            hangup.set()

    # Before the server waits for open requests: waiting calls would hold up a restart.
    app.on_shutdown.append(stop_waiting)

    async def handle(request: web.Request) -> web.StreamResponse:
        actor = authenticate(request)
        if actor is None:
            return web.json_response(
                {"error": "unauthenticated", "message": "a valid bearer token is required"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="signoff"'},
            )
        hangup = asyncio.Event()
        if request.method == "GET":
            streams.add(hangup)
        try:
            return await _asgi(request, manager, actor, hangup)
        finally:
            streams.discard(hangup)

    for method in ("GET", "POST", "DELETE"):
        app.router.add_route(method, path, handle)


async def _asgi(
    request: web.Request,
    manager: StreamableHTTPSessionManager,
    actor: Actor,
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
        _ACTOR_KEY: actor,
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
    except* ConnectionResetError:
        # The client went away mid-answer (a waiting call it gave up on): nothing is
        # lost, its approval stands and the same call again finds it.
        pass
    finally:
        hangup.set()
    if response is None:
        return web.Response(status=500)
    return response


__all__ = [
    "PROGRESS_SECONDS",
    "QUESTION_SECONDS",
    "SESSION_HEADER",
    "GatewayCatalog",
    "GatewayModel",
    "McpGateway",
    "add_gateway_routes",
    "call_key",
    "gateway_agent",
    "serve_as_gateway",
    "serve_stdio",
]
