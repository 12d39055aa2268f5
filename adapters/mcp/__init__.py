"""MCP servers as tool sources: their tools behind sign-off like any other.

The edge to Model Context Protocol servers, on the official `mcp` SDK (client side):
stdio servers (a command the bot starts, supervises and restarts) and Streamable HTTP
servers (a URL with optional headers). `adapters.mcp.hub.McpHub` connects them and keeps
the agents' catalogs current; `adapters.mcp.connection` holds one supervised connection.

This package's top level (configuration and per-tool rules) does not import the SDK, so
agents files without MCP servers work without the ``mcp`` extra.
"""

from adapters.mcp.config import Binding, HttpServer, ServerConfig, StdioServer
from adapters.mcp.rules import (
    ArgumentRules,
    Condition,
    Matcher,
    Settled,
    ToolKnobs,
    apply_to_tool,
    check_pattern,
    is_glob,
    settle,
)
from runtime.edges import OPERATORS

__all__ = [
    "OPERATORS",
    "ArgumentRules",
    "Binding",
    "Condition",
    "HttpServer",
    "Matcher",
    "ServerConfig",
    "Settled",
    "StdioServer",
    "ToolKnobs",
    "apply_to_tool",
    "check_pattern",
    "is_glob",
    "settle",
]
