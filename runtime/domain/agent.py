"""Agents: instructions, a model and a catalog of tools."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, overload

from runtime.domain.errors import ConfigurationError
from runtime.domain.model import Model
from runtime.domain.policies import Policy
from runtime.domain.subagents import delegate_tool
from runtime.domain.tickets import GrantScope
from runtime.domain.tools import (
    DEFAULT_GRANTS,
    ExpiryAction,
    OnExpiry,
    Permission,
    PermissionRule,
    ReplayPolicy,
    Tool,
    coerce_expiry,
    tool,
)


class Agent:
    """An agent the runtime can run.

    Args:
        name: Unique name; runs refer to the agent by it.
        instructions: The system prompt.
        model: The chat model: a `Model`, or a spec such as ``"openai:gpt-4.1-mini"`` that
            the `Runtime`'s ``model_resolver`` turns into one when the agent is registered.
        tools: Tools built with `runtime.tool`; more can be added with `Agent.tool`.
        version: Bump it when a change must invalidate parked tickets.
        approvers: Default approvers for the agent's `ask` tools.
        four_eyes: Default four-eyes rule for the agent's `ask` tools.
        deadline: Default decision deadline for the agent's tickets.
        on_expiry: Default expiry action: ``deny``, ``cancel`` or `Escalate`.
        max_turns: Model calls allowed per run before it fails.
        description: One line for humans (console, CLI) and for a parent agent's model
            when this agent is a sub-agent.
        subagents: Agents this one may hand tasks to: each becomes a tool
            ``delegate_to_<name>`` taking a ``task_key`` and the ``task`` (see
            `runtime.domain.subagents`); a call starts the sub-agent's own run, whose final
            answer is the call's result. Registering this agent registers them too.
        policy: A policy consulted for every call the agent proposes
            (`runtime.domain.policies`); its answer combines with the tool's permission.
    """

    def __init__(
        self,
        name: str,
        instructions: str,
        model: Model | str,
        tools: Iterable[Tool] = (),
        *,
        version: str = "1",
        approvers: Sequence[str] = (),
        four_eyes: bool = False,
        deadline: timedelta | None = None,
        on_expiry: OnExpiry | str = ExpiryAction.DENY,
        max_turns: int = 20,
        description: str = "",
        subagents: Sequence[Agent] = (),
        policy: Policy | None = None,
    ) -> None:
        if not name:
            raise ConfigurationError("an agent needs a name")
        if max_turns < 1:
            raise ConfigurationError(f"agent {name!r}: max_turns must be at least 1")
        if isinstance(model, str) and not model.strip():
            raise ConfigurationError(f"agent {name!r}: the model spec is empty")
        self.name = name
        self.instructions = instructions
        self.model: Model | str = model.strip() if isinstance(model, str) else model
        self.version = version
        self.approvers = tuple(approvers)
        self.four_eyes = four_eyes
        self.deadline = deadline
        self.on_expiry: OnExpiry = coerce_expiry(on_expiry) or ExpiryAction.DENY
        self.max_turns = max_turns
        self.description = description
        self.policy = policy
        self.tools: dict[str, Tool] = {}
        self.hidden: set[str] = set()
        """Names of catalog tools the model is not offered (a call naming one anyway is
        still checked against its permission)."""
        self._fingerprint: tuple[tuple[tuple[str, int], ...], str] | None = None
        self.subagents: dict[str, Agent] = {}
        self.delegates: dict[str, str] = {}
        """Sub-agent names by the name of the tool that delegates to them."""
        for item in tools:
            self.add_tool(item)
        for sub in subagents:
            self.add_subagent(sub)

    def add_subagent(self, sub: Agent) -> None:
        """Let this agent hand tasks to `sub` (a ``delegate_to_<name>`` tool).

        Raises:
            ConfigurationError: `sub` is not an agent, is this agent, or is listed already.
        """
        if not isinstance(sub, Agent):
            raise ConfigurationError(f"agent {self.name!r}: sub-agent {sub!r} is not an Agent")
        if sub.name == self.name or sub.name in self.subagents:
            raise ConfigurationError(
                f"agent {self.name!r} lists {sub.name!r} as a sub-agent more than once (or itself)"
            )
        summary = sub.description or sub.instructions.strip().split("\n", 1)[0][:200]
        delegating = self.add_tool(delegate_tool(sub.name, summary))
        self.subagents[sub.name] = sub
        self.delegates[delegating.name] = sub.name

    @property
    def model_name(self) -> str:
        """The model's name, or its spec while it is not resolved."""
        return self.model if isinstance(self.model, str) else self.model.name

    def with_model(self, model: Model | str) -> Agent:
        """A copy of this agent (and of its sub-agents) on another model (same names,
        versions, tools and rules)."""
        if isinstance(model, str) and not model.strip():
            raise ConfigurationError(f"agent {self.name!r}: the model spec is empty")
        other = copy.copy(self)
        other.model = model.strip() if isinstance(model, str) else model
        other.tools = dict(self.tools)
        other.hidden = set(self.hidden)
        # Its sub-agents move to the model too (a cycle is refused when registered).
        other.subagents = {name: sub.with_model(model) for name, sub in self.subagents.items()}
        other.delegates = dict(self.delegates)
        return other

    def add_tool(self, item: Tool) -> Tool:
        """Add a tool to the catalog.

        Raises:
            ConfigurationError: If a tool with that name already exists.
        """
        if not isinstance(item, Tool):
            raise ConfigurationError(f"agent {self.name!r}: {item!r} is not a Tool")
        if item.name in self.tools:
            raise ConfigurationError(f"agent {self.name!r} already has a tool {item.name!r}")
        self.tools[item.name] = item
        return item

    @overload
    def tool(self, fn: Callable[..., Any], /) -> Tool: ...

    @overload
    def tool(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        permission: Permission | str | PermissionRule = Permission.ALLOW,
        replay_policy: ReplayPolicy | str = ReplayPolicy.MANUAL,
        approvers: Sequence[str] | None = None,
        four_eyes: bool | None = None,
        deadline: timedelta | float | None = None,
        secret: Sequence[str] = (),
        on_expiry: OnExpiry | str | None = None,
        grants: Sequence[str] | None = None,
        editable: bool | Sequence[str] = True,
    ) -> Callable[[Callable[..., Any]], Tool]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        permission: Permission | str | PermissionRule = Permission.ALLOW,
        replay_policy: ReplayPolicy | str = ReplayPolicy.MANUAL,
        approvers: Sequence[str] | None = None,
        four_eyes: bool | None = None,
        deadline: timedelta | float | None = None,
        secret: Sequence[str] = (),
        on_expiry: OnExpiry | str | None = None,
        grants: Sequence[str] | None = None,
        editable: bool | Sequence[str] = True,
    ) -> Tool | Callable[[Callable[..., Any]], Tool]:
        """Register a tool on this agent; the same options as `runtime.tool`."""

        def register(func: Callable[..., Any]) -> Tool:
            built = tool(
                name=name,
                description=description,
                permission=permission,
                replay_policy=replay_policy,
                approvers=approvers,
                four_eyes=four_eyes,
                deadline=deadline,
                secret=secret,
                on_expiry=on_expiry,
                grants=grants,
                editable=editable,
            )(func)
            return self.add_tool(built)

        if fn is not None:
            return register(fn)
        return register

    @property
    def catalog_fingerprint(self) -> str:
        """A hash of every tool's name, schema, permission and replay policy."""
        key = tuple((name, id(item)) for name, item in self.tools.items())
        if self._fingerprint is None or self._fingerprint[0] != key:
            parts = [self.tools[n].fingerprint_parts for n in sorted(self.tools)]
            blob = json.dumps(parts, sort_keys=True, default=str).encode()
            self._fingerprint = (key, hashlib.sha256(blob).hexdigest()[:32])
        return self._fingerprint[1]

    def offered(self) -> list[Tool]:
        """The tools the model is offered: the catalog without the hidden ones."""
        return [item for name, item in self.tools.items() if name not in self.hidden]

    def approvers_for(self, item: Tool) -> tuple[str, ...]:
        """Approvers of `item`: its own list, or the agent's default."""
        return item.approvers if item.approvers is not None else self.approvers

    def four_eyes_for(self, item: Tool) -> bool:
        """Four-eyes rule of `item`: its own, or the agent's default."""
        return item.four_eyes if item.four_eyes is not None else self.four_eyes

    def deadline_for(self, item: Tool) -> timedelta | None:
        """Decision deadline of `item`: its own, or the agent's default."""
        return item.deadline if item.deadline is not None else self.deadline

    def grants_for(self, item: Tool) -> tuple[GrantScope, ...]:
        """The standing grants an approver may give for `item`: its own (by default for
        the rest of the run), none when it is four-eyes (its own or the agent's rule)."""
        if self.four_eyes_for(item):
            return ()
        return item.grants if item.grants is not None else DEFAULT_GRANTS

    def on_expiry_for(self, item: Tool | None) -> OnExpiry:
        """Expiry action of `item`: its own, or the agent's default."""
        if item is not None and item.on_expiry is not None:
            return item.on_expiry
        return self.on_expiry

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, tools={sorted(self.tools)})"
