"""One supervised connection to an MCP server, on the official `mcp` SDK (client side).

Each server has one long-lived asyncio task that owns its `mcp.Client` (the SDK's anyio
task groups must be entered and left by the same task): it connects, lists the tools,
waits until the connection ends or the bot stops, and then connects again after a
growing delay (a stdio server is restarted that way). Tool calls from runs go through
the session that task holds.

How a call ends, for the runtime:

- the server's result: the tool's result (its text content);
- an error result, an MCP error response or no answer within the timeout (the request is
  cancelled): `McpToolError`, which the model sees;
- no connection when the call starts: `McpServerUnavailable` (nothing was sent);
- the connection lost after the request was sent: `runtime.ToolOutcomeUnknown`, so the
  call is handled by its replay policy (``manual``: uncertain, a person resolves it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, assert_never, cast

import anyio
import anyio.lowlevel
import httpx2
import mcp_types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, ToolsListChanged
from pydantic import ValidationError

from adapters.mcp.config import (
    MAX_IMAGE_BYTES,
    HttpServer,
    ServerConfig,
    StdioServer,
    redact_urls,
)
from adapters.mcp.elicitation import Asking, asking_now
from adapters.mcp.images import recorded_block
from adapters.mcp.resources import contents_value, list_more
from runtime import SignoffError, ToolOutcomeUnknown, current_tool_context

log = logging.getLogger("signoff.mcp")

ElicitHandler = Callable[
    [Asking | None, mcp_types.ElicitRequestParams],
    Awaitable[mcp_types.ElicitResult | mcp_types.ErrorData],
]
"""Answers a server's elicitation for the call it belongs to (`adapters.mcp.elicitation`)."""

EXECUTION_KEY_META = "signoff/execution_key"
"""The ``_meta`` key of every ``tools/call`` request: the call's execution key, the same for
every retry of one call, so a server can deduplicate."""

_SETTLE_SECONDS = 5.0  # how long a lost call waits to learn why the connection ended
_LIST_PAGES = 100
_SLICE = 50  # tools handled between yields of the event loop


class McpServerUnavailable(Exception):
    """The server is not connected; the call was not sent.

    Its message is written for the model (the runtime shows it without the class name).
    """

    model_facing = True


class McpToolError(Exception):
    """The server answered with an error, or not in time (shown to the model as it is)."""

    model_facing = True


class ListingRefused(Exception):
    """A server's tool listing is over ``max_tools`` or ``max_listing_bytes``."""


@dataclass(eq=False)
class _Session:
    """One connection's life, as calls made on it see it."""

    client: Client
    in_flight: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = ""
    refused: bool = False  # it ended because a request could not even connect
    in_flight_at_end: int = 0


class _WatchedRead:
    """A transport's read stream that reports its end (the server went away)."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def describe_failure(exc: BaseException) -> str:
    """One line saying why a connection failed (never a header or an environment value)."""
    parts = []
    for leaf in _leaves(exc):
        if getattr(leaf, "shown_as_is", False):  # e.g. an OAuth server nobody signed in to
            parts.append(str(leaf))
        elif isinstance(leaf, MCPError):
            parts.append(f"MCP error {leaf.code}: {leaf.message}")
        elif isinstance(leaf, httpx2.ConnectError):
            parts.append("connection refused")
        elif isinstance(leaf, FileNotFoundError):
            parts.append(f"cannot start the command: {leaf.strerror} ({leaf.filename})")
        else:
            text = str(leaf).strip()
            parts.append(f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__)
    unique = list(dict.fromkeys(parts))
    return redact_urls("; ".join(unique)) or type(exc).__name__


def _refused(exc: BaseException) -> bool:
    leaves = _leaves(exc)
    return bool(leaves) and all(isinstance(leaf, httpx2.ConnectError) for leaf in leaves)


def result_value(result: mcp_types.CallToolResult, max_image_bytes: int = MAX_IMAGE_BYTES) -> Any:
    """What the runtime records for a tool result: its content as the model should read it
    (the text, as MCP clients pass it on); structured content only when there is no other.
    Images up to `max_image_bytes` are kept (`adapters.mcp.images`)."""
    if not result.content and result.structured_content is not None:
        return result.structured_content
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    for block in result.content:
        kept = recorded_block(block, max_image_bytes)
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif kept is not None:
            others.append(kept)
        else:
            shown = block.model_dump(mode="json", exclude_none=True, by_alias=True)
            if isinstance(shown.get("data"), str):  # images, audio: not for the transcript
                shown["data"] = f"<{len(shown['data'])} base64 characters>"
            others.append(shown)
    if not others:
        return "\n".join(texts)
    return [*({"type": "text", "text": t} for t in texts), *others]


def _error_text(result: mcp_types.CallToolResult) -> str:
    texts = [b.text for b in result.content if isinstance(b, mcp_types.TextContent)]
    return "\n".join(texts).strip() or "the tool reported an error"


class ServerConnection:
    """A supervised connection to one MCP server.

    Args:
        config: How to reach it.
        on_listing: Awaited (in the connection's task) with each fresh tool listing, before
            calls may use the connection.
    """

    def __init__(
        self,
        config: ServerConfig,
        on_listing: Callable[[ServerConnection, list[mcp_types.Tool]], Awaitable[None]],
    ) -> None:
        self.config = config
        self.auth: Callable[[], httpx2.Auth] | None = None  # a new one for each connection
        self._signed_in: httpx2.Auth | None = None  # the current connection's
        self.tools: list[mcp_types.Tool] | None = None
        self.resources: list[mcp_types.Resource] = []
        self.prompts: list[mcp_types.Prompt] = []
        self.elicit: ElicitHandler | None = None
        self.asking: dict[str, Asking] = {}  # calls in flight, by call id
        self.reason: str | None = None
        self._on_listing = on_listing
        self._session: _Session | None = None
        self._wake = asyncio.Event()
        self._relist = asyncio.Event()
        self._relisted = asyncio.Event()
        self._retry = asyncio.Event()  # a refresh: no more waiting before the next attempt
        self._up = asyncio.Event()
        self._first = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """The server's name."""
        return self.config.name

    @property
    def up(self) -> bool:
        """Whether a session is connected now."""
        return self._session is not None

    def start(self) -> None:
        """Start the connection's task."""
        self._task = asyncio.create_task(self._run(), name=f"mcp:{self.name}")

    def retry_now(self) -> None:
        """While not connected: connect again now rather than after the wait."""
        if self._session is None:
            self._wake.set()

    async def first_attempt(self) -> None:
        """Wait until the first connection attempt succeeded or failed."""
        await self._first.wait()

    async def stop(self) -> None:
        """Close the session (a stdio server's process is stopped) and end the task."""
        self._stop.set()
        self._wake.set()
        task = self._task
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=15.0)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def refresh(self) -> int:
        """List the tools again now; a server that is down is retried at once.

        Returns:
            How many tools the server listed.

        Raises:
            McpServerUnavailable: No listing within the server's ``connect_timeout``.
        """
        self._relisted.clear()
        if self._session is None:
            self._retry.set()
        else:
            self._relist.set()
        try:
            await asyncio.wait_for(self._relisted.wait(), timeout=self.config.connect_timeout)
        except TimeoutError:
            raise McpServerUnavailable(
                f"MCP server {self.name!r} did not list its tools within "
                f"{self.config.connect_timeout:g}s ({self.reason or 'no answer'})"
            ) from None
        return len(self.tools or [])

    # -- the connection's task --------------------------------------------------------------
    async def _run(self) -> None:
        first, longest = self.config.restart_delay
        delay = first
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            self._wake.clear()
            self._relist.clear()
            session: _Session | None = None
            reason = "the server closed the connection"
            refused = False
            came_up: float | None = None
            try:
                with anyio.CancelScope() as scope:
                    scope.deadline = anyio.current_time() + self.config.connect_timeout
                    async with self._client() as client:
                        tools = await self._list(client)
                        self.resources, self.prompts = await list_more(client)
                        scope.deadline = math.inf
                        session = _Session(client)
                        await self._listed(tools)
                        self._session = session
                        self.reason = None
                        self._up.set()
                        came_up = loop.time()
                        log.info("MCP %s is up with %d tools", self.config.shown, len(tools))
                        self._first.set()
                        self._relisted.set()
                        await self._serve(client)
                        self._session = None
                        self._up.clear()
                if scope.cancelled_caught:
                    reason = f"no answer within {self.config.connect_timeout:g}s"
            except Exception as exc:
                over = [leaf for leaf in _leaves(exc) if isinstance(leaf, ListingRefused)]
                if over:
                    reason = str(over[0])
                    log.error(
                        "MCP %s: %s", self.config.shown, reason, extra={"mcp_server": self.name}
                    )
                else:
                    reason = describe_failure(exc)
                    refused = _refused(exc)
            finally:
                self._session = None
                self._up.clear()
                if session is not None:
                    session.reason, session.refused = reason, refused
                    session.in_flight_at_end = session.in_flight
                    session.ended.set()
            if self._stop.is_set():
                break
            if came_up is not None and loop.time() - came_up >= longest:
                delay = first  # it was up for a while: this is a new failure
            self.reason = reason
            self._first.set()
            log.warning(
                "MCP %s is not available: %s; retrying in %gs",
                self.config.shown,
                reason,
                delay,
                extra={"mcp_server": self.name},
            )
            waits = [asyncio.ensure_future(e.wait()) for e in (self._wake, self._retry)]
            try:
                await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            self._retry.clear()
            delay = min(delay * 2, longest)

    async def _serve(self, client: Client) -> None:
        """Hold the connection until it ends; list the tools again when the server says
        they changed, and (HTTP) every ``refresh_interval`` seconds."""
        interval = self.config.refresh_interval if isinstance(self.config, HttpServer) else None
        async with anyio.create_task_group() as group:
            group.start_soon(self._listen, client)
            while not self._wake.is_set():
                waiter = asyncio.ensure_future(self._wake.wait())
                relist = asyncio.ensure_future(self._relist.wait())
                try:
                    await asyncio.wait(
                        (waiter, relist), timeout=interval, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    waiter.cancel()
                    relist.cancel()
                if self._wake.is_set():
                    break
                self._relist.clear()
                with anyio.fail_after(self.config.connect_timeout):
                    tools = await self._list(client)
                if tools != self.tools:  # unchanged: nothing to rebuild
                    log.info("MCP %s changed its tools: now %d", self.config.shown, len(tools))
                    await self._listed(tools)
                self._relisted.set()
            group.cancel_scope.cancel()

    async def _listen(self, client: Client) -> None:
        """Ask the server (protocol 2026-07-28 and later) to tell when its tools change;
        older servers send ``notifications/tools/list_changed`` (`_on_message`)."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                if not subscription.honored.tools_list_changed:
                    return
                self._relist.set()  # a change before the subscription would be missed
                async for event in subscription:
                    if isinstance(event, ToolsListChanged):
                        self._relist.set()
        except ListenNotSupportedError:
            return
        except Exception as exc:  # the connection's own failure ends it elsewhere
            log.debug("MCP %s: no tool change events: %s", self.config.shown, describe_failure(exc))
            self._relist.set()  # events may have been missed

    async def _listed(self, tools: list[mcp_types.Tool]) -> None:
        self.tools = tools
        await self._on_listing(self, tools)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._relist.set()
        await anyio.lowlevel.checkpoint()

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[Client]:
        async with self._transport() as (read, write):
            watched = _WatchedRead(read, self._wake.set)
            client = Client(
                _streams(watched, write),
                cache=None,
                message_handler=self._on_message,
                read_timeout_seconds=self.config.timeout,
                client_info=mcp_types.Implementation(name="signoff", version="1"),
                # Declared to the server only where the agents file allows it.
                elicitation_callback=self._on_elicit if self.config.elicitation else None,
            )
            async with client:
                yield client

    async def _on_elicit(
        self, context: Any, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        if self.elicit is None:  # nobody to ask in this process
            return mcp_types.ElicitResult(action="cancel")
        return await self.elicit(asking_now(self.asking), params)

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        config = self.config
        match config:
            case StdioServer():
                params = StdioServerParameters(
                    command=config.command,
                    args=list(config.args),
                    env=dict(config.env) or None,
                    cwd=config.cwd,
                )
                async with stdio_client(params, errlog=sys.stderr) as streams:
                    yield streams
            case HttpServer():
                # A read timeout longer than any call: the SDK times calls out itself.
                timeout = httpx2.Timeout(30.0, read=max(300.0, config.timeout + 30.0))
                auth = self._signed_in = self.auth() if self.auth is not None else None
                async with (
                    httpx2.AsyncClient(
                        headers=dict(config.headers), timeout=timeout, auth=auth
                    ) as http,
                    streamable_http_client(config.url, http_client=http) as streams,
                ):
                    yield streams
            case _:
                assert_never(config)

    async def _list(self, client: Client) -> list[mcp_types.Tool]:
        """Every page of the listing, refused once it passes ``max_tools`` or
        ``max_listing_bytes``.

        Raises:
            ListingRefused: The listing is over a cap.
        """
        config = self.config
        tools: list[mcp_types.Tool] = []
        size = 0
        cursor: str | None = None
        for _ in range(_LIST_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            if len(tools) > config.max_tools:
                raise ListingRefused(
                    f"its tool listing has more than {config.max_tools} tools (max_tools); "
                    "none of its tools are offered"
                )
            for index, item in enumerate(page.tools):
                size += len(item.name) + len(item.description or "")
                size += len(json.dumps(item.input_schema, default=str))
                if size > config.max_listing_bytes:
                    raise ListingRefused(
                        f"its tool listing takes more than {config.max_listing_bytes} bytes "
                        "(max_listing_bytes); none of its tools are offered"
                    )
                if index % _SLICE == _SLICE - 1:
                    await asyncio.sleep(0)  # a long page: let other tasks run
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    # -- calls ------------------------------------------------------------------------------
    async def call(self, tool: str, args: dict[str, Any], execution_key: str) -> Any:
        """Call `tool` with `args`; the execution key goes in the request's ``_meta``.

        While the server is down (restarting, reconnecting) the call waits for it, for at
        most the server's ``timeout``; the time waited counts against that timeout.

        Raises:
            McpServerUnavailable: Still not connected when the timeout ran out; nothing
                was sent.
            McpToolError: An error result, an MCP error, or no answer in time.
            ToolOutcomeUnknown: The connection was lost after the request was sent.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.timeout
        session = await self._connected(deadline)
        if session is None:
            raise McpServerUnavailable(
                f"MCP server {self.name!r} is not available "
                f"({self.reason or 'not connected'}); try again later"
            )
        remaining = max(deadline - loop.time(), 0.001)
        session.in_flight += 1
        asking = _asking(self, tool)
        if asking is not None:
            self.asking[asking.context.call_id] = asking
        try:
            result = await session.client.call_tool(
                tool,
                args,
                read_timeout_seconds=remaining,
                meta=cast(mcp_types.RequestParamsMeta, {EXECUTION_KEY_META: execution_key}),
            )
        except MCPError as exc:
            ended = getattr(self._signed_in, "ended", None)
            if ended:  # its OAuth sign-in ended: the server refused the call (401)
                self._wake.set()  # connect again: down until someone signs in
                raise McpServerUnavailable(ended) from None
            if exc.code == mcp_types.CONNECTION_CLOSED:
                await self._lost(session, tool)
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise McpToolError(
                    f"{tool} got no answer from MCP server {self.name!r} within "
                    f"{self.config.timeout:g}s; the request was cancelled"
                ) from None
            raise McpToolError(
                f"MCP server {self.name!r} refused {tool}: error {exc.code}: {exc.message}"
            ) from None
        except (ValidationError, RuntimeError) as exc:
            raise McpToolError(
                f"MCP server {self.name!r} gave {tool} an answer signoff cannot use: {exc}"
            ) from None
        finally:
            session.in_flight -= 1
            if asking is not None:
                self.asking.pop(asking.context.call_id, None)
        if result.is_error:
            raise McpToolError(_error_text(result))
        return result_value(result, self.config.max_image_bytes)

    async def read_resource(self, uri: str) -> str:
        """Read one of the server's listed resources (`adapters.mcp.resources`).

        Raises:
            McpServerUnavailable: Not connected within the timeout; nothing was sent.
            McpToolError: The URI is not listed, or the server refused or did not answer.
        """
        if not any(r.uri == uri for r in self.resources):
            listed = ", ".join(r.uri for r in self.resources[:20]) or "none"
            raise McpToolError(
                f"MCP server {self.name!r} lists no resource {uri!r} (its resources: {listed})"
            )
        loop = asyncio.get_running_loop()
        session = await self._connected(loop.time() + self.config.timeout)
        if session is None:
            raise McpServerUnavailable(
                f"MCP server {self.name!r} is not available "
                f"({self.reason or 'not connected'}); try again later"
            )
        try:
            with anyio.fail_after(self.config.timeout):
                result = await session.client.read_resource(uri, cache_mode="bypass")
        except TimeoutError:
            raise McpToolError(
                f"MCP server {self.name!r} did not send {uri} within {self.config.timeout:g}s"
            ) from None
        except MCPError as exc:
            raise McpToolError(
                f"MCP server {self.name!r} refused to read {uri}: error {exc.code}: {exc.message}"
            ) from None
        return contents_value(result)

    async def _connected(self, deadline: float) -> _Session | None:
        """The session, once there is one; None if none came before `deadline` (or the
        connection is stopping)."""
        loop = asyncio.get_running_loop()
        while self._session is None and not self._stop.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            up = asyncio.ensure_future(self._up.wait())
            stop = asyncio.ensure_future(self._stop.wait())
            try:
                await asyncio.wait(
                    (up, stop), timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                up.cancel()
                stop.cancel()
        return self._session

    async def _lost(self, session: _Session, tool: str) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.ended.wait(), timeout=_SETTLE_SECONDS)
        if session.ended.is_set() and session.refused and session.in_flight_at_end <= 1:
            # The request's own connection was refused: it never reached the server.
            raise McpServerUnavailable(
                f"MCP server {self.name!r} is not available ({session.reason}); try again later"
            )
        why = session.reason or "the connection broke"
        raise ToolOutcomeUnknown(
            f"MCP server {self.name!r} went away before answering {tool} ({why}); "
            "it may or may not have run"
        )


def _asking(connection: ServerConnection, tool: str) -> Asking | None:
    """The call being made, for the server's elicitations (None outside a run's call)."""
    if not connection.config.elicitation:
        return None
    try:
        context = current_tool_context()
    except SignoffError:
        return None
    return Asking(context, connection.name, connection.config.prefix + tool)


@contextlib.asynccontextmanager
async def _streams(read: Any, write: Any) -> AsyncIterator[Any]:
    yield read, write
