"""Policies as code: a hook that sees the whole call and answers allow, ask or deny.

An agent may name a `Policy`. Where the tool's permission is worked out for a call, the
policy is asked too, with a `PolicyCall` (who asks and their groups, the agent and its
version, the tool and its arguments, the run, the thread, where the run came from and
when). Its `PolicyAnswer` combines with the tool's permission by `combine`: the stricter
of the two wins (deny over ask over allow). When the combined answer is ask and the
policy itself asked, its approvers (exactly those, four-eyes still applied) and its
deadline replace the tool's.

A policy that fails (an engine error, a file that no longer reads, no answer in time)
fails closed: the call asks, or is denied where the policy's ``on_error`` is deny.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from runtime.domain.errors import SignoffError
from runtime.domain.tools import Permission

_STRICTNESS = {Permission.ALLOW: 0, Permission.ASK: 1, Permission.DENY: 2}

DEFAULT_POLICY_TIMEOUT = 2.0
"""Seconds a policy has to answer before the call fails closed."""


class PolicyError(SignoffError):
    """A policy could not answer: its engine failed, its file is bad, or its answer is
    not one of allow, ask or deny."""


REQUESTER_GROUPS = "requester_groups"
"""The origin key of the groups the requester belonged to when the run started, as the
edge that started it verified them (the console's and API's token or single sign-on
groups, an external approval's sender's)."""


@dataclass(frozen=True)
class PolicyCall:
    """Everything a policy sees of one tool call.

    Attributes:
        requester: Who started the run (None when nobody did, e.g. a timer).
        requester_groups: The requester's groups recorded on the run when it started
            (its origin's `REQUESTER_GROUPS`); empty when none were.
        agent: The agent's name.
        agent_version: The agent's version.
        tool: The tool's name.
        args: The validated arguments (secret ones included: the policy may test them).
        run_id: The run.
        thread_id: The run's thread.
        source: Where the run came from: ``slack``, ``discord``, ``console``, ``api``,
            ``webhook``, ``external`` (an agent built elsewhere asking through the
            approvals API or a Claude Code hook) or ``mcp`` (the MCP gateway).
        at: When the call was proposed (engines read it in UTC, with its hour and the
            day of the week).
    """

    requester: str | None
    requester_groups: tuple[str, ...]
    agent: str
    agent_version: str
    tool: str
    args: Mapping[str, Any]
    run_id: str
    thread_id: str
    source: str
    at: datetime

    def as_input(self) -> dict[str, Any]:
        """The call as the JSON document engines read."""
        utc = self.at.astimezone(UTC)
        return {
            "requester": self.requester,
            "requester_groups": list(self.requester_groups),
            "agent": self.agent,
            "agent_version": self.agent_version,
            "tool": self.tool,
            "args": dict(self.args),
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "source": self.source,
            "time": utc.isoformat(),
            "epoch_seconds": int(utc.timestamp()),
            "hour_utc": utc.hour,
            "weekday_utc": utc.strftime("%A"),
        }


@dataclass(frozen=True)
class PolicyAnswer:
    """A policy's answer for one call.

    Attributes:
        permission: Allow, ask or deny.
        approvers: Who decides when it asks (approver entries such as ``user:U1`` or
            ``group:sre``); None keeps the tool's.
        deadline: How long a person has to decide when it asks; None keeps the tool's.
        reason: Why, in words: recorded, shown on the card and, for a deny, told to the
            model.
    """

    permission: Permission
    approvers: tuple[str, ...] | None = None
    deadline: timedelta | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.approvers is not None and not self.approvers:
            raise PolicyError("a policy's approvers must name at least one approver")
        if self.deadline is not None and self.deadline <= timedelta(0):
            raise PolicyError("a policy's deadline must be positive")


class Policy(Protocol):
    """A policy an agent consults for every tool call it proposes.

    Attributes:
        id: The policy's name (the agents file's ``[policies.<id>]``).
        version: Its version, recorded with every ticket, decision and grant under it.
        on_error: What a call gets when the policy fails: ask or deny.
        timeout: Seconds it has to answer.
    """

    @property
    def id(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def on_error(self) -> Permission: ...

    @property
    def timeout(self) -> float: ...

    async def evaluate(self, call: PolicyCall) -> PolicyAnswer:
        """Answer for `call`.

        Raises:
            PolicyError: The policy could not answer.
        """
        ...


@dataclass(frozen=True)
class PolicyOutcome:
    """What a policy said of one call, as recorded.

    Attributes:
        id: The policy's id.
        version: The policy's version.
        answer: Its answer (on an error: the fail-closed one).
        error: What went wrong, when it failed.
    """

    id: str
    version: str
    answer: PolicyAnswer
    error: str | None = None

    def details(self) -> dict[str, Any]:
        """The outcome as a flight-recorder field."""
        shown: dict[str, Any] = {
            "id": self.id,
            "version": self.version,
            "answer": self.answer.permission.value,
        }
        if self.answer.reason is not None:
            shown["reason"] = self.answer.reason
        if self.answer.approvers is not None:
            shown["approvers"] = list(self.answer.approvers)
        if self.answer.deadline is not None:
            shown["deadline_seconds"] = int(self.answer.deadline.total_seconds())
        if self.error is not None:
            shown["error"] = self.error
        return shown


def stricter(a: Permission, b: Permission) -> Permission:
    """The stricter of two permissions: deny over ask over allow."""
    return a if _STRICTNESS[a] >= _STRICTNESS[b] else b


def combine(rule: Permission, answer: PolicyAnswer) -> Permission:
    """How a tool's permission and a policy's answer combine: the stricter wins."""
    return stricter(rule, answer.permission)


def failed_closed(policy: Policy, error: str) -> PolicyOutcome:
    """The outcome of a policy that failed: ask, or deny where its ``on_error`` says."""
    permission = Permission.DENY if policy.on_error is Permission.DENY else Permission.ASK
    answer = PolicyAnswer(permission, reason=f"policy {policy.id} failed")
    return PolicyOutcome(policy.id, policy.version, answer, error=error)


def parse_answer(value: Any) -> PolicyAnswer:
    """A policy answer from an engine's JSON: ``"allow" | "ask" | "deny"`` or an object
    ``{"decision": ..., "approvers": [...], "deadline_seconds": N, "reason": "..."}``.

    Raises:
        PolicyError: The value is not such an answer.
    """
    if isinstance(value, str):
        value = {"decision": value}
    if not isinstance(value, Mapping):
        raise PolicyError(f"a policy answered {value!r}, not allow, ask or deny")
    unknown = set(value) - {"decision", "approvers", "deadline_seconds", "reason"}
    if unknown:
        raise PolicyError(f"a policy's answer has unknown keys: {', '.join(sorted(unknown))}")
    try:
        permission = Permission(str(value.get("decision")))
    except ValueError:
        raise PolicyError(
            f"a policy answered decision {value.get('decision')!r}, not allow, ask or deny"
        ) from None
    approvers = value.get("approvers")
    if approvers is not None and (
        not isinstance(approvers, list | tuple)
        or not all(isinstance(a, str) and a.strip() for a in approvers)
    ):
        raise PolicyError("a policy's approvers must be a list of approver entries")
    seconds = value.get("deadline_seconds")
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0
    ):
        raise PolicyError("a policy's deadline_seconds must be a positive number")
    reason = value.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise PolicyError("a policy's reason must be text")
    return PolicyAnswer(
        permission,
        approvers=tuple(a.strip() for a in approvers) if approvers is not None else None,
        deadline=timedelta(seconds=seconds) if seconds is not None else None,
        reason=reason,
    )


@dataclass(frozen=True)
class StaticPolicy:
    """A policy that gives one answer to every call (tests and examples).

    Attributes:
        answer: The answer.
        id: Its id.
        version: Its version.
        on_error: What a call gets if it failed (it never does).
        timeout: Seconds it has to answer.
    """

    answer: PolicyAnswer
    id: str = "static"
    version: str = "1"
    on_error: Permission = Permission.ASK
    timeout: float = DEFAULT_POLICY_TIMEOUT
    seen: list[PolicyCall] = field(default_factory=list, compare=False, repr=False)

    async def evaluate(self, call: PolicyCall) -> PolicyAnswer:
        """The one answer."""
        self.seen.append(call)
        return self.answer
