"""External agents: agents that run elsewhere and ask signoff before a tool call.

An external approval is one run of an `ExternalAgent`. Its built-in model is
deterministic: on the run's first turn it proposes exactly the requested call (with the
request's description as its stated reason, which cards show as the why); on the second
it ends the run with a short text. The tool it calls is materialised by name from the
agent's rules and *authorises without side effects* (replay policy ``safe``): running it
again changes nothing. So rules, grants, tickets, cards, four-eyes, deadlines, edits and
the flight recorder all work as for any agent, and signoff never executes the external
tool itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from runtime.domain.agent import Agent
from runtime.domain.approvals import OVERRIDES
from runtime.domain.errors import ConfigurationError
from runtime.domain.model import ModelRequest, ModelResponse, ToolCallRequest
from runtime.domain.tickets import STAND_IN_VERSION
from runtime.domain.tools import (
    ExpiryAction,
    OnExpiry,
    Permission,
    ReplayPolicy,
    Tool,
)

EXTERNAL_MODEL = "signoff:external"
"""The name external runs record for their built-in model."""

ORIGIN_KEY = "approval"
"""The key of a run's origin holding what the approval request said (session, sender,
description, overrides)."""

ToolFactory = Callable[[str], Tool]
"""Builds the authorising tool for a tool name, with the agent's rules for it applied."""

_ANY_OBJECT: dict[str, Any] = {"type": "object"}
_CATALOG_LIMIT = 4096


async def _authorise(args: dict[str, Any]) -> dict[str, Any]:
    # Authorising changes nothing: the external agent runs the call itself.
    return {"authorised": True}


@dataclass(frozen=True)
class ExternalTool(Tool):
    """A tool of an external agent: calling it only records that the call was allowed.

    Its arguments are any JSON object (a request may bring its own schema, checked when
    it is asked), so the arguments an approver may change are those of the call itself.
    """

    def editable_for(self, args: Mapping[str, Any]) -> tuple[str, ...]:
        """The arguments of a call with `args` an approver may change (never secret ones)."""
        if self.editable is False:
            return ()
        names = [str(n) for n in args]
        if self.editable is not True:
            names = [n for n in names if n in self.editable]
        return tuple(n for n in names if n not in self.secret)

    def parameters_for(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """An object schema with one property per argument of the call, typed by its value."""
        return {
            "type": "object",
            "properties": {str(name): _schema_of(value) for name, value in args.items()},
        }


def _schema_of(value: Any) -> dict[str, Any]:
    match value:
        case bool():
            return {"type": "boolean"}
        case int():
            return {"type": "integer"}
        case float():
            return {"type": "number"}
        case str():
            return {"type": "string"}
        case list():
            return {"type": "array"}
        case dict():
            return {"type": "object"}
        case _:
            return {}


def authorising_tool(name: str, permission: Permission = Permission.ASK) -> ExternalTool:
    """The tool an external agent's call of `name` runs: it authorises, nothing more.

    Args:
        name: The external tool's name.
        permission: Its base permission (asking, unless a rule says otherwise).
    """
    return ExternalTool(
        name=name,
        description=f"Authorise a call of {name} made by an external agent",
        fn=_authorise,
        permission=permission,
        replay_policy=ReplayPolicy.SAFE.value,
        _schema=_ANY_OBJECT,
    )


class ExternalCatalog(dict[str, Tool]):
    """An external agent's tools: any name its rules admit, materialised when asked for.

    ``get``, ``in`` and ``[]`` answer for any tool name (the factory builds it, the
    catalog keeps it); iterating lists only the tools built so far.
    """

    def __init__(self, factory: ToolFactory) -> None:
        super().__init__()
        self._factory = factory

    def get(self, name: str, default: Any = None) -> Any:
        found = super().get(name)
        if found is None and isinstance(name, str) and name:
            found = self._factory(name)
            if found.name != name:
                raise ConfigurationError(f"the tool built for {name!r} is named {found.name!r}")
            if len(self) >= _CATALOG_LIMIT:
                # Names come from callers: keep the catalog bounded (tools rebuild alike).
                self.clear()
            self[name] = found
        return found if found is not None else default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __getitem__(self, name: str) -> Tool:
        found = super().get(name) or self.get(name)
        if found is None:
            raise KeyError(name)
        return found


class ExternalModel:
    """The deterministic model of external runs.

    The run's opening message holds the request (`request_message`); the first turn
    proposes that call, the next one ends the run with what became of it.
    """

    name = EXTERNAL_MODEL

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Propose the requested call, then end the run."""
        start = 0
        for index, message in enumerate(request.messages):
            if message.get("role") == "user":
                start = index
        opening = request.messages[start] if request.messages else {}
        later = request.messages[start + 1 :]
        if any(m.get("role") == "assistant" for m in later):
            results = [str(m.get("content") or "") for m in later if m.get("role") == "tool"]
            result = results[-1] if results else ""
            if _reconciling(opening):
                return ModelResponse(text=_reconciled(result))
            return ModelResponse(text=_ending(result))
        try:
            asked = json.loads(str(opening.get("content") or ""))
            tool = str(asked["tool"])
            arguments = asked["arguments"]
        except (ValueError, KeyError, TypeError):
            return ModelResponse(text="Not an approval request; nothing to authorise.")
        return ModelResponse(
            text=asked.get("description") or None,
            tool_calls=(ToolCallRequest(id="call_1", name=tool, arguments=json.dumps(arguments)),),
        )


def _reconciling(opening: dict[str, Any]) -> bool:
    """Whether a run's opening request reconciles an approval's unknown outcome
    (`runtime.services.outcomes`) rather than asks for one."""
    try:
        asked = json.loads(str(opening.get("content") or ""))
    except ValueError:
        return False
    return isinstance(asked, dict) and bool(asked.get("reconciles"))


def _reconciled(result: str) -> str:
    if '"authorised"' in result:
        return "Reconciled: the call may run again."
    return f"Reconciled: {result}" if result else "Reconciled."


def _ending(result: str) -> str:
    if result.startswith("Permission denied"):
        return f"Not authorised. {result}"
    if '"authorised"' in result:
        return "Authorised."
    return f"Not authorised: {result}" if result else "Not authorised."


def request_message(tool: str, arguments: dict[str, Any], description: str | None) -> str:
    """The opening message of an external run: the call to propose, as JSON."""
    return json.dumps(
        {"tool": tool, "arguments": arguments, "description": description},
        sort_keys=True,
        separators=(",", ":"),
    )


class ExternalAgent(Agent):
    """An agent that runs elsewhere and asks signoff before its tool calls.

    Args:
        name: The agent (source) name requests give.
        tools: Builds the authorising tool for a name with the rules for it applied
            (default: every tool asks, `authorising_tool`).
        fingerprint: Identifies the rules: tickets parked under other rules are stale, and
            grants given under them no longer apply (default: the agent's name and version).
        version: Bump it to invalidate parked tickets.
        approvers: Default approvers of its calls (none: the requester decides).
        four_eyes: Default four-eyes rule.
        deadline: Default decision deadline.
        on_expiry: Default expiry action.
        overrides: What a request may override: ``approvers``, ``deadline``.
        approvals: Where its cards go: ``{"platform": "console"}`` (default), or
            ``{"platform": "slack" | "discord", "channel": ...}``.
        description: One line for humans.
        declared: False for an agent synthesised for an undeclared name.
    """

    def __init__(
        self,
        name: str,
        tools: ToolFactory | None = None,
        *,
        fingerprint: str | None = None,
        version: str = "1",
        approvers: Iterable[str] = (),
        four_eyes: bool = False,
        deadline: timedelta | None = None,
        on_expiry: OnExpiry | str = ExpiryAction.DENY,
        overrides: Iterable[str] = (),
        approvals: Mapping[str, Any] | None = None,
        description: str = "",
        declared: bool = True,
    ) -> None:
        super().__init__(
            name,
            instructions="",
            model=ExternalModel(),
            version=version,
            approvers=tuple(approvers),
            four_eyes=four_eyes,
            deadline=deadline,
            on_expiry=on_expiry,
            max_turns=3,
            description=description or f"External agent {name}",
        )
        chosen = tuple(overrides)
        unknown = sorted(set(chosen) - set(OVERRIDES))
        if unknown:
            raise ConfigurationError(
                f"agent {name!r}: overrides may name {', '.join(OVERRIDES)}; got "
                f"{', '.join(unknown)}"
            )
        self.overrides = frozenset(chosen)
        self.approvals: dict[str, Any] = dict(approvals or {"platform": "console"})
        self.declared = declared
        self.tools = ExternalCatalog(tools or authorising_tool)
        blob = json.dumps([name, version, fingerprint], default=str).encode()
        self._external_fingerprint = hashlib.sha256(blob).hexdigest()[:32]

    @property
    def catalog_fingerprint(self) -> str:
        """Identifies the agent's rules (not the tools built so far)."""
        return self._external_fingerprint

    def with_model(self, model: Any) -> Agent:
        """An external agent always runs on its built-in model: itself."""
        return self

    def add_subagent(self, sub: Agent) -> None:
        """External agents hand no tasks to other agents."""
        raise ConfigurationError(f"agent {self.name!r} is external: it has no sub-agents")


def agent_for_run(
    agents: Mapping[str, Agent], name: str, origin: Mapping[str, Any]
) -> Agent | None:
    """The agent that drives a run of agent `name` with origin `origin`: the one loaded under
    the name, but never the stand-in synthesised for an undeclared external agent when the
    run is not an external approval (its agent is gone: the run is not driven by another)."""
    agent = agents.get(name)
    if isinstance(agent, ExternalAgent) and not agent.declared and ORIGIN_KEY not in origin:
        return None
    return agent


def is_external(agent: Agent | None) -> bool:
    """Whether `agent` is an external agent."""
    return isinstance(agent, ExternalAgent)


def request_of(origin: Mapping[str, Any]) -> dict[str, Any]:
    """What an external run's origin recorded of its request (empty for other runs)."""
    found = origin.get(ORIGIN_KEY)
    return dict(found) if isinstance(found, Mapping) else {}


def overridden_approvers(origin: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The approvers a request chose for its call, if it chose any."""
    chosen = request_of(origin).get("approvers")
    return tuple(str(a) for a in chosen) if isinstance(chosen, list) else None


def overridden_deadline(origin: Mapping[str, Any]) -> timedelta | None:
    """The decision deadline a request chose for its call, if it chose one."""
    seconds = request_of(origin).get("deadline_seconds")
    return timedelta(seconds=float(seconds)) if isinstance(seconds, int | float) else None


def extra_secret(origin: Mapping[str, Any]) -> frozenset[str]:
    """The argument names a request asked to mask besides its tool's own."""
    names = request_of(origin).get("secret")
    return frozenset(str(n) for n in names) if isinstance(names, list) else frozenset()


UndeclaredAgents = Literal["any", "declared"]
"""Whether an approval may name an agent nobody declared (``any``: an `ExternalAgent`
with the defaults is synthesised for it) or not (``declared``)."""

_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_agent_name(name: str) -> bool:
    """Whether `name` may name an undeclared external agent: 1-64 letters, digits,
    ``_``, ``.`` or ``-``, starting with a letter or digit."""
    return bool(_AGENT_NAME.match(name))


class AgentRegistry(dict[str, Agent]):
    """The runtime's agents by name; with undeclared agents allowed, ``get`` answers for
    any other valid name with a synthesised `ExternalAgent` (every tool asks, the
    requester decides, cards in the console), the same one for the name every time.

    ``[]`` and ``in`` see only the registered agents, so starting a run still needs a
    registered agent.
    """

    def __init__(self) -> None:
        super().__init__()
        self.undeclared: UndeclaredAgents = "declared"
        self._synthesised: dict[str, ExternalAgent] = {}

    def get(self, name: str, default: Any = None) -> Any:
        found = super().get(name)
        if found is not None:
            return found
        if self.undeclared != "any" or not isinstance(name, str) or not check_agent_name(name):
            return default
        made = self._synthesised.get(name)
        if made is None:
            if len(self._synthesised) >= _CATALOG_LIMIT:
                self._synthesised.clear()
            made = ExternalAgent(name, declared=False, version=STAND_IN_VERSION)
            self._synthesised[name] = made
        return made
