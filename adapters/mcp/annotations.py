"""What an MCP server's own word about its tools may change: annotations and tool filters.

Tool annotations (``readOnlyHint``, ``idempotentHint``, ``destructiveHint``) are the
server's claims, not facts: by default they change nothing. A server declared with
``trust_annotations = true`` lets them set two defaults, and only where no rule of the
agent sets the option:

- ``readOnlyHint: true``: permission ``allow`` (instead of ``ask``);
- ``idempotentHint: true``: replay policy ``idempotent`` (instead of ``manual``).

A tool that also says ``destructiveHint: true`` gets neither: an annotation may only
loosen a default when the tool does not claim to destroy anything.

A server's ``tools`` and ``exclude_tools`` globs choose which of its listed tools the
agents are offered at all.

This module has no MCP dependency.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from adapters.mcp.rules import Settled
from runtime import Permission, ReplayPolicy

Origin = Literal["rule", "annotation", "default"]
"""Where a tool's permission or replay policy came from."""


class Hints(Protocol):
    """The annotation fields read here (`mcp_types.ToolAnnotations` has them)."""

    @property
    def read_only_hint(self) -> bool | None: ...

    @property
    def destructive_hint(self) -> bool | None: ...

    @property
    def idempotent_hint(self) -> bool | None: ...


@dataclass(frozen=True)
class Defaults:
    """A tool's base permission and replay policy, and where each came from.

    Attributes:
        permission: The base permission (a rule's conditions still apply on top).
        replay_policy: The replay policy.
        permission_from: ``rule``, ``annotation`` or ``default``.
        replay_from: ``rule``, ``annotation`` or ``default``.
    """

    permission: Permission
    replay_policy: ReplayPolicy
    permission_from: Origin
    replay_from: Origin


def defaults(settled: Settled, hints: Hints | None, *, trusted: bool) -> Defaults:
    """The base permission and replay policy of an MCP tool.

    Args:
        settled: The agent's rules for the tool.
        hints: The tool's annotations, if it has any.
        trusted: The server's ``trust_annotations``.
    """
    destructive = hints is not None and hints.destructive_hint is True
    usable = trusted and hints is not None and not destructive
    rule_permission = settled.permission is not None or bool(
        settled.deny_if or settled.ask_if or settled.allow_if
    )
    permission_from: Origin
    if settled.permission is not None:
        permission, permission_from = settled.permission, "rule"
    elif rule_permission:
        permission, permission_from = Permission.ASK, "rule"
    elif usable and hints is not None and hints.read_only_hint is True:
        permission, permission_from = Permission.ALLOW, "annotation"
    else:
        permission, permission_from = Permission.ASK, "default"
    replay: ReplayPolicy
    replay_from: Origin
    if settled.replay_policy is not None:
        replay, replay_from = settled.replay_policy, "rule"
    elif usable and hints is not None and hints.idempotent_hint is True:
        replay, replay_from = ReplayPolicy.IDEMPOTENT, "annotation"
    else:
        replay, replay_from = ReplayPolicy.MANUAL, "default"
    return Defaults(permission, replay, permission_from, replay_from)


def offered(name: str, tools: Sequence[str] | None, exclude: Sequence[str]) -> bool:
    """Whether a server's tool `name` passes its ``tools`` and ``exclude_tools`` globs."""
    if tools is not None and not any(fnmatch.fnmatchcase(name, g) for g in tools):
        return False
    return not any(fnmatch.fnmatchcase(name, g) for g in exclude)
