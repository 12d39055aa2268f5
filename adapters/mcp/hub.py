"""MCP servers' tools in the agents' catalogs, kept current as servers come and go.

`McpHub` starts one `ServerConnection` per server, turns every listed MCP tool into a
`runtime.Tool` (its JSON input schema used as-is, its description for the model) with the
settings of the agent's matching `ToolKnobs` (by default ``ask`` and replay policy
``manual``), and puts it in each agent's catalog. A fresh listing (a restarted server)
replaces the agent's tools of that server, so a changed schema changes the agent's
catalog fingerprint and decisions on tickets parked before the change are refused as
`StaleTicket`.

A server that cannot be reached at start-up does not stop the bot: its tools named
without a glob in the agent's settings are listed as *unavailable* (a call to one gets an
error result naming the server and the reason, without asking anyone), its other tools
are absent, and they all appear once the server answers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import httpx2
import mcp_types

from adapters.mcp.annotations import Defaults, Origin, defaults, offered
from adapters.mcp.config import Binding, HttpServer, ServerConfig
from adapters.mcp.connection import McpServerUnavailable, ServerConnection
from adapters.mcp.elicitation import InputAgent, InputDesk
from adapters.mcp.resources import TOOL_NAME, resource_tool
from adapters.mcp.rules import (
    Settled,
    check_arguments,
    is_glob,
    settle,
    settled_grants,
    step_up_places,
)
from runtime import (
    Agent,
    ConfigurationError,
    Permission,
    Tool,
    ToolOutcomeUnknown,
    current_tool_context,
)
from runtime.edges import ArgumentError

if TYPE_CHECKING:
    from runtime import Runtime

log = logging.getLogger("signoff.mcp")

_SLICE = 20  # tools built between yields of the event loop


class _Unavailable:
    """The permission rule of a placeholder: refuses every call, with the reason."""

    def __init__(self, connection: ServerConnection) -> None:
        self.connection = connection
        self.__name__ = "unavailable"
        self.__qualname__ = "unavailable"
        self.__doc__ = f"MCP server {connection.name!r} could not be reached"

    def __call__(self, args: dict[str, Any]) -> Permission:
        # Refused while the arguments are checked: nothing is asked or dispatched, and the
        # model and the flight recorder get the reason.
        raise ArgumentError(
            f"MCP server {self.connection.name!r} is not available "
            f"({self.connection.reason or 'not connected yet'}); try again later"
        )


def _invoker(connection: ServerConnection, tool: str) -> Any:
    if tool == TOOL_NAME and connection.config.resources:

        async def read(args: dict[str, Any]) -> Any:
            return await connection.read_resource(str(args.get("uri")))

        return read

    async def invoke(args: dict[str, Any]) -> Any:
        context = current_tool_context()
        try:
            return await connection.call(tool, args, context.execution_key)
        except McpServerUnavailable as exc:
            if context.actor is None:
                raise
            # A person approved this call: an error result would use the approval up.
            # As an unknown outcome it follows its replay policy instead (``manual``: a
            # person retries it once the server is back, or aborts it).
            raise ToolOutcomeUnknown(f"{exc}; nothing was sent") from None

    return invoke


class McpHub:
    """The MCP servers the agents use, connected for as long as the hub runs.

    Args:
        servers: Every server the bindings may name.
        bindings: Which agent uses which servers, with its per-tool settings.
    """

    def __init__(
        self,
        servers: Sequence[ServerConfig],
        bindings: Sequence[Binding],
        *,
        oauth: Callable[[str], httpx2.Auth] | None = None,
    ) -> None:
        used = {name for binding in bindings for name in binding.servers}
        known = {server.name: server for server in servers}
        missing = used - set(known)
        if missing:
            raise ConfigurationError(f"unknown MCP servers: {', '.join(sorted(missing))}")
        self._bindings = list(bindings)
        self._connections = {
            name: ServerConnection(known[name], self._listed) for name in known if name in used
        }
        for name, connection in self._connections.items():
            if isinstance(connection.config, HttpServer) and connection.config.oauth is not None:
                if oauth is None:
                    raise ConfigurationError(
                        f"MCP server {name!r} signs in with OAuth, which needs a key to seal "
                        "its tokens with (SIGNOFF_SECRETS_KEY)"
                    )
                connection.auth = functools.partial(oauth, name)
        # (agent, server) -> names of that server's tools in the agent's catalog
        self._owned: dict[tuple[str, str], list[str]] = {}
        self._unavailable: set[tuple[str, str]] = set()
        # (agent, tool) -> where its permission and replay policy came from
        self._origins: dict[tuple[str, str], tuple[Origin, Origin]] = {}
        # Replaced tools stay referenced: an agent caches its fingerprint by the tools'
        # ids, and a freed id could be reused by a new tool with another schema.
        self._retired: list[Tool] = []
        self._problems: list[str] | None = None
        self._desk: InputDesk | None = None

    @property
    def connections(self) -> dict[str, ServerConnection]:
        """The connections, by server name."""
        return dict(self._connections)

    async def start(self) -> None:
        """Connect every server and wait for each one's first attempt.

        Raises:
            ConfigurationError: A tool setting names a tool that a reachable server does
                not have (or an argument it does not take); nothing keeps running then.
        """
        self._problems = []
        for connection in self._connections.values():
            connection.start()
        await asyncio.gather(*(c.first_attempt() for c in self._connections.values()))
        for connection in self._connections.values():
            if connection.tools is None:
                self._placeholders(connection)
        problems, self._problems = self._problems, None
        if problems:
            await self.stop()
            raise ConfigurationError("; ".join(dict.fromkeys(problems)))

    async def stop(self) -> None:
        """Close every session; stdio servers' processes are stopped."""
        desk, self._desk = self._desk, None
        if desk is not None:
            await desk.stop()
        await asyncio.gather(*(c.stop() for c in self._connections.values()))

    def attach(self, runtime: Runtime) -> None:
        """Let the servers with ``elicitation`` ask for input during calls of `runtime`'s
        runs: registers each agent's input agent (`adapters.mcp.elicitation`) and starts
        the sweep of input runs whose call is no longer in flight."""
        if self._desk is not None:
            return
        asking = {n for n, c in self._connections.items() if c.config.elicitation}
        if not asking:
            return
        desk = InputDesk(runtime)
        timeouts = {name: self._connections[name].config.timeout for name in asking}
        for binding in self._bindings:
            if asking & set(binding.servers):
                runtime.register(InputAgent(binding.agent, timeouts))
        for name in asking:
            self._connections[name].elicit = desk.elicit
        desk.start()
        self._desk = desk

    def source_of(self, agent: str, tool: str) -> str | None:
        """``mcp:<server>`` (plus `` (unavailable)``) for an MCP tool, else None."""
        for (owner, server), names in self._owned.items():
            if owner == agent and tool in names:
                suffix = " (unavailable)" if (owner, server) in self._unavailable else ""
                return f"mcp:{server}{suffix}"
        return None

    def origin_of(self, agent: str, tool: str) -> tuple[Origin, Origin] | None:
        """Where an MCP tool's permission and replay policy came from (``rule``,
        ``annotation`` or ``default``); None for a tool of no listed server."""
        return self._origins.get((agent, tool))

    async def refresh(self, server: str) -> int:
        """List `server`'s tools again now (a server that is down is retried at once).

        Returns:
            How many tools the server listed.

        Raises:
            KeyError: No agent uses a server of that name.
            McpServerUnavailable: The server did not list its tools within its
                ``connect_timeout``.
        """
        connection = self._connections[server]
        return await connection.refresh()

    # -- building tools -------------------------------------------------------------------
    async def _listed(self, connection: ServerConnection, listing: list[mcp_types.Tool]) -> None:
        config = connection.config
        listing = [t for t in listing if offered(t.name, config.tools, config.exclude_tools)]
        problems: list[str] = []
        for binding in self._bindings:
            if connection.name not in binding.servers:
                continue
            try:
                tools, hidden = await self._tools(binding, connection, listing, problems)
                self._install(binding, connection, tools, problems, hidden)
            except Exception as exc:  # never kill the connection's task
                problems.append(f"agent {binding.agent.name!r}: {exc}")
            problems.extend(self._unmatched(binding, connection, listing))
        if self._problems is not None:
            self._problems.extend(problems)
        else:
            for problem in problems:
                log.error("MCP server %r: %s", connection.name, problem)

    async def _tools(
        self,
        binding: Binding,
        connection: ServerConnection,
        listing: list[mcp_types.Tool],
        problems: list[str],
    ) -> tuple[list[Tool], set[str]]:
        """The agent's tools of one listing (and the names of those the model is not
        offered), built a slice at a time (each compiles a schema validator), yielding
        the event loop between slices."""
        tools = []
        hidden: set[str] = set()
        if connection.config.resources:
            if any(item.name == TOOL_NAME for item in listing):
                problems.append(
                    f"MCP server {connection.name!r} has a tool named {TOOL_NAME!r}: with "
                    "resources = true it would be hidden; turn resources off"
                )
            else:
                listing = [*listing, resource_tool(connection.resources)]
        for index, item in enumerate(listing):
            if index % _SLICE == _SLICE - 1:
                await asyncio.sleep(0)
            qualified = f"{connection.name}.{item.name}"
            settled = settle(qualified, binding.knobs)
            schema = dict(item.input_schema)
            problems.extend(check_arguments(settled, qualified, schema))
            chosen = defaults(
                settled, item.annotations, trusted=connection.config.trust_annotations
            )
            try:
                built = self._tool(connection, item, schema, settled, chosen)
            except ConfigurationError as exc:
                problems.append(f"{qualified}: {exc}")
                continue
            tools.append(built)
            self._origins[(binding.agent.name, built.name)] = (
                chosen.permission_from,
                chosen.replay_from,
            )
            if settled.hidden(built.permission):
                hidden.add(built.name)
        return tools, hidden

    def _tool(
        self,
        connection: ServerConnection,
        item: mcp_types.Tool,
        schema: dict[str, Any],
        settled: Settled,
        chosen: Defaults,
    ) -> Tool:
        properties = schema.get("properties")
        secret = [
            name
            for name in settled.secret or ()
            if not isinstance(properties, dict) or name in properties
        ]
        return Tool.from_schema(
            connection.config.prefix + item.name,
            item.description or item.title or "",
            schema,
            _invoker(connection, item.name),
            permission=settled.permission_rule(chosen.permission),
            replay_policy=chosen.replay_policy,
            approvers=settled.approvers,
            four_eyes=settled.four_eyes,
            deadline=settled.deadline,
            secret=secret,
            on_expiry=settled.on_expiry,
            grants=settled_grants(connection.config.prefix + item.name, settled),
            decide_in=step_up_places(connection.config.prefix + item.name, settled),
            sso=bool(settled.sso),
            server=connection.name,
            # Names a glob entry gave that this tool lacks are left out, as for secret.
            editable=(
                True
                if settled.editable is None
                else settled.editable
                if isinstance(settled.editable, bool)
                else [
                    name
                    for name in settled.editable
                    if not isinstance(properties, dict) or name in properties
                ]
            ),
        )

    def _placeholders(self, connection: ServerConnection) -> None:
        """Tools named exactly in the settings of a server that is down at start-up."""
        head = connection.name + "."
        for binding in self._bindings:
            if connection.name not in binding.servers:
                continue
            config = connection.config
            names = [
                k.pattern[len(head) :]
                for k in binding.knobs
                if k.pattern.startswith(head)
                and not is_glob(k.pattern)
                and offered(k.pattern[len(head) :], config.tools, config.exclude_tools)
            ]
            tools = []
            hidden: set[str] = set()
            for name in dict.fromkeys(names):
                settled = settle(head + name, binding.knobs)
                if settled.hidden(settled.permission_rule(Permission.ASK)):
                    hidden.add(connection.config.prefix + name)
                tools.append(
                    Tool.from_schema(
                        connection.config.prefix + name,
                        f"Unavailable: MCP server {connection.name!r} could not be reached.",
                        {"type": "object"},
                        _invoker(connection, name),
                        permission=_Unavailable(connection),
                        secret=settled.secret or (),
                        server=connection.name,
                    )
                )
            problems: list[str] = []
            self._install(binding, connection, tools, problems, hidden)
            self._unavailable.add((binding.agent.name, connection.name))
            for problem in problems:
                log.error("MCP server %r: %s", connection.name, problem)

    def _install(
        self,
        binding: Binding,
        connection: ServerConnection,
        tools: list[Tool],
        problems: list[str],
        hidden: set[str],
    ) -> None:
        agent: Agent = binding.agent
        key = (agent.name, connection.name)
        catalog = dict(agent.tools)
        previous = {name: catalog.pop(name) for name in self._owned.get(key, []) if name in catalog}
        owned = []
        for tool in tools:
            if tool.name in catalog:
                problems.append(
                    f"agent {agent.name!r} already has a tool named {tool.name!r}; give server "
                    f"{connection.name!r} a prefix"
                )
                continue
            old = previous.get(tool.name)
            if old is not None and _same_contract(old, tool):
                tool = old  # unchanged: keep the object, so nothing looks changed
            catalog[tool.name] = tool
            owned.append(tool.name)
        self._retired.extend(t for t in previous.values() if catalog.get(t.name) is not t)
        agent.tools.clear()
        agent.tools.update(catalog)
        agent.hidden.difference_update(self._owned.get(key, []))
        agent.hidden.update(name for name in owned if name in hidden)
        self._owned[key] = owned
        self._unavailable.discard(key)

    def _unmatched(
        self, binding: Binding, connection: ServerConnection, listing: list[mcp_types.Tool]
    ) -> list[str]:
        head = connection.name + "."
        names = [head + item.name for item in listing]
        if connection.config.resources:
            names.append(head + TOOL_NAME)
        problems = []
        for knobs in binding.knobs:
            if not knobs.pattern.startswith(head) or any(knobs.matches(n) for n in names):
                continue
            have = ", ".join(sorted(item.name for item in listing)) or "none"
            if connection.config.tools is not None or connection.config.exclude_tools:
                have += ", after its tools and exclude_tools filters"
            if is_glob(knobs.pattern):
                problems.append(
                    f"{knobs.where}: {knobs.pattern!r} matches no tool of MCP server "
                    f"{connection.name!r} (its tools: {have})"
                )
            else:
                problems.append(
                    f"{knobs.where}: MCP server {connection.name!r} has no tool "
                    f"{knobs.pattern[len(head) :]!r} (its tools: {have})"
                )
        return problems


def _same_contract(old: Tool, new: Tool) -> bool:
    return old.spec() == new.spec() and old.fingerprint_parts == new.fingerprint_parts
