"""How to reach an MCP server, and which agent uses which servers (no MCP dependency)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from adapters.mcp.rules import ToolKnobs
from runtime import Agent

MAX_TOOLS = 1000
"""Default cap on the tools one listing may have."""

MAX_LISTING_BYTES = 4 * 1024 * 1024
"""Default cap on the size of one listing (names, descriptions and schemas, as JSON)."""

MAX_IMAGE_BYTES = 512 * 1024
"""Default cap on one image of a tool result (decoded); a bigger one is recorded as a note."""

_URL = re.compile(r"https?://[^\s'\"<>]+")


def redact_url(url: str) -> str:
    """``scheme://host:port/…``: a URL as logs may show it (its path, query and user
    information may hold a key)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<a URL>"
    if ":" in host:
        host = f"[{host}]"
    tail = "/…" if parts.path not in ("", "/") or parts.query or parts.fragment else ""
    return f"{parts.scheme}://{host}{port}{tail}"


def redact_urls(text: str) -> str:
    """`text` with every http(s) URL in it shortened by `redact_url`."""
    return _URL.sub(lambda match: redact_url(match.group(0)), text)


@dataclass(frozen=True)
class StdioServer:
    """A server the bot starts as a subprocess and talks to over its stdin and stdout.

    Attributes:
        name: The server's name in rules (``<name>.<tool>``) and logs.
        command: The program to run.
        args: Its arguments.
        env: Extra environment variables (on top of ``PATH``, ``HOME`` and the like).
        cwd: Working directory of the process.
        timeout: Seconds a tool call may take before it is cancelled.
        connect_timeout: Seconds to wait for the server to start and list its tools.
        prefix: Put before the server's tool names, as the model sees them.
        restart_delay: First and longest wait (seconds) before restarting after an exit;
            the wait grows (doubling) while starts keep failing or the process keeps
            exiting within the longest wait after it listed its tools.
        max_tools: A listing with more tools is refused (the server counts as down).
        max_listing_bytes: A listing whose names, descriptions and schemas take more bytes
            (as JSON) is refused.
        elicitation: Whether the server may ask for input during a tool call
            (``elicitation/create``, form mode): the capability is declared to it, and each
            request becomes a typed-input ticket (`adapters.mcp.elicitation`).
        resources: Whether the agent gets ``read_resource``, reading the server's listed
            resources (`adapters.mcp.resources`).
        trust_annotations: Whether the server's tool annotations may set defaults
            (``readOnlyHint``: ``allow``, ``idempotentHint``: replay policy
            ``idempotent``) where no rule sets them (`adapters.mcp.annotations`).
        tools: Globs of the tool names offered (None: every tool).
        exclude_tools: Globs of tool names left out (after `tools`).
        max_image_bytes: An image of a tool result that is bigger (decoded) is recorded
            as a note saying so (`adapters.mcp.images`).
    """

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    timeout: float = 60.0
    connect_timeout: float = 10.0
    prefix: str = ""
    restart_delay: tuple[float, float] = (0.5, 30.0)
    max_tools: int = MAX_TOOLS
    max_listing_bytes: int = MAX_LISTING_BYTES
    elicitation: bool = False
    resources: bool = False
    trust_annotations: bool = False
    tools: tuple[str, ...] | None = None
    exclude_tools: tuple[str, ...] = ()
    max_image_bytes: int = MAX_IMAGE_BYTES

    @property
    def shown(self) -> str:
        """How logs may name it (never the environment)."""
        return f"stdio server {self.name!r} ({self.command})"


@dataclass(frozen=True)
class HttpServer:
    """A server reached over Streamable HTTP.

    Attributes:
        name: The server's name in rules (``<name>.<tool>``) and logs.
        url: The MCP endpoint, e.g. ``https://mcp.example.com/mcp``.
        oauth: Sign in with OAuth, a person signing in from the console (None: no OAuth;
            `headers` may still carry a static token).
        headers: Sent with every request (e.g. ``Authorization``); never logged.
        timeout: Seconds a tool call may take before it is cancelled.
        connect_timeout: Seconds to wait for the server to answer and list its tools.
        prefix: Put before the server's tool names, as the model sees them.
        restart_delay: First and longest wait (seconds) before reconnecting; the wait
            grows (doubling) while connections keep failing or keep ending within the
            longest wait after the listing.
        max_tools: A listing with more tools is refused (the server counts as down).
        max_listing_bytes: A listing whose names, descriptions and schemas take more bytes
            (as JSON) is refused.
        refresh_interval: Seconds between listings while connected (a server without a
            session cannot tell signoff that it restarted with other tools); a
            ``notifications/tools/list_changed`` from the server lists them at once.
        elicitation: Whether the server may ask for input during a tool call
            (``elicitation/create``, form mode): the capability is declared to it, and each
            request becomes a typed-input ticket (`adapters.mcp.elicitation`).
        resources: Whether the agent gets ``read_resource``, reading the server's listed
            resources (`adapters.mcp.resources`).
        trust_annotations: Whether the server's tool annotations may set defaults
            (``readOnlyHint``: ``allow``, ``idempotentHint``: replay policy
            ``idempotent``) where no rule sets them (`adapters.mcp.annotations`).
        tools: Globs of the tool names offered (None: every tool).
        exclude_tools: Globs of tool names left out (after `tools`).
        max_image_bytes: An image of a tool result that is bigger (decoded) is recorded
            as a note saying so (`adapters.mcp.images`).
    """

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = 60.0
    connect_timeout: float = 10.0
    prefix: str = ""
    restart_delay: tuple[float, float] = (0.5, 30.0)
    max_tools: int = MAX_TOOLS
    max_listing_bytes: int = MAX_LISTING_BYTES
    refresh_interval: float = 60.0
    oauth: OAuthClient | None = None
    elicitation: bool = False
    resources: bool = False
    trust_annotations: bool = False
    tools: tuple[str, ...] | None = None
    exclude_tools: tuple[str, ...] = ()
    max_image_bytes: int = MAX_IMAGE_BYTES

    @property
    def shown(self) -> str:
        """How logs may name it: scheme, host and port only (the path, query and user
        information may hold a key)."""
        return f"HTTP server {self.name!r} ({redact_url(self.url)})"


ServerConfig = StdioServer | HttpServer


@dataclass(frozen=True)
class OAuthClient:
    """How signoff signs in to an MCP server that uses OAuth (`adapters.mcp.oauth`).

    Attributes:
        client_id: A client registered with the authorization server beforehand (None:
            dynamic client registration, which the server must offer).
        client_secret: That client's secret (None: a public client).
        scopes: The scopes asked for (empty: those the server names).
    """

    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    scopes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Binding:
    """The MCP servers one agent uses, and the settings of their tools.

    Attributes:
        agent: The agent whose catalog receives the servers' tools.
        servers: Names of the servers, in order.
        knobs: Per-tool settings by name or glob (``<server>.<tool>``).
    """

    agent: Agent
    servers: tuple[str, ...]
    knobs: tuple[ToolKnobs, ...] = ()
