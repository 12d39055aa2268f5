"""How to reach an MCP server, and which agent uses which servers (no MCP dependency)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from adapters.mcp.rules import ToolKnobs
from runtime import Agent


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
        restart_delay: First and longest wait (seconds) before restarting after an exit.
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
        headers: Sent with every request (e.g. ``Authorization``); never logged.
        timeout: Seconds a tool call may take before it is cancelled.
        connect_timeout: Seconds to wait for the server to answer and list its tools.
        prefix: Put before the server's tool names, as the model sees them.
        restart_delay: First and longest wait (seconds) before reconnecting.
    """

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = 60.0
    connect_timeout: float = 10.0
    prefix: str = ""
    restart_delay: tuple[float, float] = (0.5, 30.0)

    @property
    def shown(self) -> str:
        """How logs may name it: no credentials, query or fragment."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"HTTP server {self.name!r} ({parts.scheme}://{host}{port}{parts.path})"


ServerConfig = StdioServer | HttpServer


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
