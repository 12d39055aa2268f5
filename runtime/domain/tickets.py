"""Resume tickets, the answers they accept, and the one validation every decision passes.

A parked run waits on one open `ResumeTicket` per pending item. The host reads the
committed ticket, builds a `ResumeCommand` from it with `ResumeCommand.from_ticket`, and
the runtime checks the command with `validate_resume` before anything changes.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, assert_never

import jsonschema
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    field_validator,
    model_serializer,
    model_validator,
)

from runtime.domain.constraints import Constraint, normalize
from runtime.domain.errors import (
    Expired,
    InvalidAnswer,
    NotAwaiting,
    ResolutionError,
    StaleTicket,
    Unauthorized,
)
from runtime.domain.jsontext import non_finite_path
from runtime.domain.states import TicketStatus

ANYONE = "*"
"""The approver entry that lets anyone decide."""
REQUESTER = "requester"
"""The approver entry naming the run's requester."""
GROUP_PREFIX = "group:"
"""Approver entries ``group:<name>`` match groups the edge verified the actor is in."""

# The version of the agent synthesised for a name no agent is loaded under, where undeclared
# external agents may ask (`runtime.domain.external.AgentRegistry`): a ticket parked under
# an agent of that name that is gone now finds it, and must not take it for its own.
STAND_IN_VERSION = "undeclared-external"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- what a run waits on -------------------------------------------------------------


class ToolPermission(_Frozen):
    """A tool call that needs a person's allow or deny before it runs."""

    kind: Literal["tool_permission"] = "tool_permission"
    call_id: str
    tool: str
    args: dict[str, Any]
    reason: str | None = None
    # What the agent's policy said of the call (runtime.domain.policies), when it has one.
    policy: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _without_policy(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A call no policy saw serializes as it always did.
        dumped: dict[str, Any] = handler(self)
        if dumped.get("policy", 0) is None:
            del dumped["policy"]
        return dumped

    @property
    def policy_wants_person(self) -> bool:
        """Whether the agent's policy asked (or denied, or failed) for this call: a person
        decides it each time, and no standing grant stands in."""
        return self.policy is not None and self.policy.get("answer") != "allow"


class RemoteInput(_Frozen):
    """A tool asked for typed input; the answer must fit `schema` (a JSON schema)."""

    kind: Literal["remote_input"] = "remote_input"
    call_id: str
    tool: str
    prompt: str
    schema_: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Uncertain(_Frozen):
    """A `manual` tool was dispatched but its outcome was never recorded."""

    kind: Literal["uncertain"] = "uncertain"
    call_id: str
    tool: str
    args: dict[str, Any]
    execution_key: str


class Pause(_Frozen):
    """The run was paused by an operator and waits to be resumed."""

    kind: Literal["pause"] = "pause"


class Child(_Frozen):
    """A sub-agent's run that a delegating call waits on.

    No person answers it: it is settled by the runtime when the child run ends, with a
    `ChildFinished` answer. People decide the child run's own tickets instead.
    """

    kind: Literal["child"] = "child"
    call_id: str
    child_run_id: str
    task_key: str
    agent: str


AwaitTarget = Annotated[
    ToolPermission | RemoteInput | Uncertain | Pause | Child, Discriminator("kind")
]
AWAIT_TARGET: TypeAdapter[AwaitTarget] = TypeAdapter(AwaitTarget)


# --- what a person answers -------------------------------------------------------------


GrantScope = Literal["run", "thread"]
"""How far a standing grant reaches: the rest of the run, or the run's thread."""

MAX_GRANT_HOURS = 720.0
"""The longest a grant may last (30 days)."""


class GrantRequest(_Frozen):
    """Allow more than this one call: later calls of the tool run without asking.

    Attributes:
        scope: ``run`` (the rest of this run) or ``thread`` (runs of this thread started
            by the same requester).
        hours: How long the grant lasts; a thread grant lasts 8 hours unless told, a run
            grant as long as the run unless told.
        args: Which later calls it covers: None (any arguments), ``"same"`` (exactly the
            arguments of this call) or a constraint (see `runtime.domain.constraints`).
    """

    scope: GrantScope = "run"
    hours: float | None = Field(default=None, gt=0, le=MAX_GRANT_HOURS, allow_inf_nan=False)
    args: Literal["same"] | Constraint | None = None

    @field_validator("args", mode="before")
    @classmethod
    def _constraint(cls, value: Any) -> Any:
        if value is None or value == "same":
            return value
        if isinstance(value, str):
            raise ValueError('args is "same", an object of argument tests, or absent')
        return normalize(value)


class Allow(_Frozen):
    """Let the tool run (and, with `grant`, later calls of it too).

    Attributes:
        grant: Also allow later calls of the tool (see `runtime.engine.grants`).
        args: Arguments an approver changed before allowing, merged over the call's own
            (see `runtime.domain.edits`); None allows the call as the model asked for it.
    """

    kind: Literal["allow"] = "allow"
    # Both left out when absent, so a plain allow is stored as it always was.
    grant: GrantRequest | None = Field(default=None, exclude_if=lambda value: value is None)
    args: dict[str, Any] | None = Field(default=None, exclude_if=lambda value: value is None)


class Deny(_Frozen):
    """Refuse the call (or the input request); the model sees a blocked result."""

    kind: Literal["deny"] = "deny"
    reason: str | None = None


class InputData(_Frozen):
    """Typed input for a `RemoteInput` target."""

    kind: Literal["input"] = "input"
    data: dict[str, Any]


class Resolve(_Frozen):
    """Record the verified result of an uncertain call; the tool is not run again."""

    kind: Literal["resolve"] = "resolve"
    result: Any


class Retry(_Frozen):
    """Accept that an uncertain call may run twice and run it again."""

    kind: Literal["retry"] = "retry"


class Abort(_Frozen):
    """Give up on an uncertain call; the model sees that it was aborted."""

    kind: Literal["abort"] = "abort"
    reason: str | None = None


class Continue(_Frozen):
    """Resume a paused run."""

    kind: Literal["continue"] = "continue"


class ChildFinished(_Frozen):
    """How a sub-agent's run ended; settles the `Child` ticket of its parent.

    ``done`` carries the child's final answer (the delegating call's result); ``failed``
    and ``cancelled`` carry why (the delegating call fails with it).
    """

    kind: Literal["child_finished"] = "child_finished"
    status: Literal["done", "failed", "cancelled"]
    text: str | None = None
    error: str | None = None


Answer = Annotated[
    Allow | Deny | InputData | Resolve | Retry | Abort | Continue | ChildFinished,
    Discriminator("kind"),
]
ANSWER: TypeAdapter[Answer] = TypeAdapter(Answer)


class Actor(_Frozen):
    """Who is deciding.

    Attributes:
        id: A stable user id, e.g. a Slack ``U123`` or ``cli:alice``.
        groups: Groups the edge verified the user belongs to (user groups, roles,
            channel memberships); matched against ``group:<id>`` approver entries.
        operator: An operator acting with database or console authority. Operators may
            decide any ticket except where four-eyes forbids them as the requester.
        platform: Where the decision came from (``slack``, ``discord``, ``cli`` ...).
        name: A display name for messages.
        sso: Signed in through single sign-on (the console after an OpenID Connect
            sign-in), so a rule may require a decision made that way.
        aliases: The other ids of the same person (their ids on other edges and the
            person's own id, see `runtime.domain.identity`); requester, four-eyes and
            approver checks treat every one of them as this actor.
    """

    id: str
    groups: frozenset[str] = frozenset()
    operator: bool = False
    platform: str = "api"
    name: str | None = None
    sso: bool = False
    aliases: frozenset[str] = frozenset()

    @property
    def ids(self) -> frozenset[str]:
        """Every id of the person acting: `id` and `aliases`."""
        return self.aliases | {self.id}


def actor_id(actor: Actor | str | None) -> str | None:
    """The user id of who acts, given as an `Actor`, a bare user id or nobody (None)."""
    return actor.id if isinstance(actor, Actor) else actor


class ResumeTicket(_Frozen):
    """What a parked run waits on. Read it from the store; never rebuild it from a UI event.

    Attributes:
        ticket_id: Unique id of the ticket.
        correlation: Random one-use token a resume command must echo.
        run_id: The parked run.
        thread_id: The run's conversation.
        agent: The agent of the parked run.
        agent_version: Version of the agent definition that parked.
        catalog_fingerprint: Fingerprint of the tool catalog that parked.
        target: Exactly what is awaited.
        requester: The user who started the run.
        approvers: Who may decide: user ids, ``group:<name>``, ``requester`` or ``*``;
            empty means the requester.
        four_eyes: Whether the requester is forbidden to decide.
        deadline: When the ticket expires, if ever.
        status: Whether it is still open.
        created_at: When it was opened.
        decision: The accepted answer, once decided.
        decided_by: The actor id that decided it.
        decided_at: When it was decided or expired.
        chain: For a sub-agent's run: the agents from the top-level run down to this
            run's own (``("ops", "billing")``); empty for a top-level run.
        decide_in: Step-up: the only platforms the ticket may be decided on (e.g.
            ``("console",)``); empty means anywhere.
        sso: Step-up: a console decision must come from a single sign-on session.
    """

    ticket_id: str
    correlation: str
    run_id: str
    thread_id: str
    agent: str
    agent_version: str
    catalog_fingerprint: str
    target: AwaitTarget
    requester: str | None = None
    approvers: tuple[str, ...] = ()
    four_eyes: bool = False
    deadline: datetime | None = None
    status: TicketStatus = TicketStatus.OPEN
    created_at: datetime
    decision: Answer | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    chain: tuple[str, ...] = ()
    decide_in: tuple[str, ...] = ()
    sso: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> ResumeTicket:
        if self.status is TicketStatus.OPEN and (self.decision or self.decided_by):
            raise ValueError("an open ticket cannot carry a decision")
        if self.status is TicketStatus.DECIDED and self.decision is None:
            raise ValueError("a decided ticket needs its decision")
        if self.deadline is not None and self.deadline < self.created_at:
            raise ValueError("a ticket's deadline cannot precede its creation")
        if isinstance(self.target, Pause) and (self.approvers or self.four_eyes):
            raise ValueError("a pause ticket is decided by operators, not approvers")
        if isinstance(self.target, Child) and (self.approvers or self.four_eyes or self.deadline):
            raise ValueError("a child ticket is settled by its child run, not by approvers")
        return self

    @property
    def call_id(self) -> str | None:
        """The tool call this ticket waits on, if any."""
        match self.target:
            case ToolPermission() | RemoteInput() | Uncertain() | Child():
                return self.target.call_id
            case Pause():
                return None
            case _:
                assert_never(self.target)

    def may_decide(self, actor: Actor) -> bool:
        """Whether `actor` may decide this ticket (ignores status and deadline).

        Without approvers the requester decides; with approvers exactly the listed
        entries do (the requester only through a ``requester`` entry, or ``*``). Four-eyes
        always excludes the requester. Every id of the actor's person counts
        (`Actor.aliases`): the requester is refused under any of them. Operators decide
        any ticket four-eyes allows them.
        """
        ids = actor.ids
        if self.four_eyes and self.requester in ids:
            return False
        if actor.operator:
            return True
        if not self.approvers:
            return self.requester is not None and self.requester in ids
        return any(self._admits(entry, actor, ids) for entry in self.approvers)

    def decidable_here(self, actor: Actor) -> bool:
        """Whether step-up lets `actor` decide from where they are (`decide_in`, `sso`)."""
        if self.decide_in and actor.platform not in self.decide_in:
            return False
        return not (self.sso and actor.platform == "console" and not actor.sso)

    def step_up_refusal(self, actor: Actor) -> str:
        """Why step-up refuses `actor`'s decision, for people."""
        where = " or ".join(self.decide_in) if self.decide_in else "console"
        if self.decide_in and actor.platform not in self.decide_in:
            return f"ticket {self.ticket_id} may only be decided in the {where}"
        return f"ticket {self.ticket_id} may only be decided after signing in with single sign-on"

    def _admits(self, entry: str, actor: Actor, ids: frozenset[str]) -> bool:
        if entry == ANYONE:
            return True
        if entry == REQUESTER:
            return self.requester is not None and self.requester in ids
        if entry.startswith(GROUP_PREFIX):
            return entry[len(GROUP_PREFIX) :] in actor.groups
        return entry in ids

    def deciders(self) -> tuple[str, ...]:
        """Who may decide, as approver entries for an edge to word in its own syntax.

        The ``requester`` entry (or, without approvers, the default) becomes the
        requester's id; the requester is left out when four-eyes excludes them. Empty
        when only an operator can decide. See `excluded` for the four-eyes exclusion.
        """
        entries = self.approvers or ((REQUESTER,) if self.requester is not None else ())
        shown: list[str] = []
        for entry in entries:
            if entry == REQUESTER:
                if self.requester is None or self.four_eyes:
                    continue
                entry = self.requester
            if entry not in shown:
                shown.append(entry)
        return tuple(shown)

    @property
    def excluded(self) -> str | None:
        """The requester, when four-eyes forbids them to decide; else None."""
        return self.requester if self.four_eyes else None

    def who_may_decide(self) -> str:
        """A short plain-text description of who may decide, for refusals."""
        return describe_deciders(self.deciders(), self.four_eyes)


def plain_entry(entry: str) -> str:
    """An approver entry in plain words: ``anyone``, ``members of <group>``, or the id."""
    if entry == ANYONE:
        return "anyone"
    if entry.startswith(GROUP_PREFIX):
        return f"members of {entry[len(GROUP_PREFIX) :]}"
    return entry


def describe_deciders(
    deciders: Sequence[str], four_eyes: bool, name: Callable[[str], str] = plain_entry
) -> str:
    """Who may decide, for people: the deciders (`ResumeTicket.deciders`) as `name` words
    each (an edge passes its mentions), or "an operator"; four-eyes says "not the
    requester"."""
    people = list(dict.fromkeys(name(entry) for entry in deciders))
    described = ", ".join(people) if people else "an operator"
    if four_eyes:
        described += " (not the requester)"
    return described


def describe_chain(chain: Sequence[str], name: Callable[[str], str] = str) -> str | None:
    """For a sub-agent's request, the agents that delegated to it, for people: ``"ops"``,
    or ``"ops → billing"`` for a grandchild (each as `name` words); None for a top-level
    run's own request (`chain` empty or only the asking agent)."""
    above = list(chain[:-1])
    if not above:
        return None
    return " → ".join(name(agent) for agent in above)


class ResumeCommand(_Frozen):
    """A typed decision on one committed ticket.

    Build it with `from_ticket`: identity fields come from the committed ticket, never
    from a UI event.
    """

    ticket_id: str
    correlation: str
    run_id: str
    thread_id: str
    answer: Answer
    actor: Actor
    at: datetime

    @classmethod
    def from_ticket(
        cls, ticket: ResumeTicket, answer: Answer, actor: Actor, now: datetime
    ) -> ResumeCommand:
        """Build a command answering `ticket` as `actor` at time `now`."""
        return cls(
            ticket_id=ticket.ticket_id,
            correlation=ticket.correlation,
            run_id=ticket.run_id,
            thread_id=ticket.thread_id,
            answer=answer,
            actor=actor,
            at=now,
        )


AnswerKind = Literal[
    "allow", "deny", "input", "resolve", "retry", "abort", "continue", "child_finished"
]
"""The ``kind`` of an `Answer`: what a button or form will send, before it is filled in."""


PermissionAnswer = Allow | Deny
"""The answers a `ToolPermission` accepts."""
InputAnswer = InputData | Deny
"""The answers a `RemoteInput` accepts."""
UncertainAnswer = Resolve | Retry | Abort
"""The answers an `Uncertain` call accepts."""
PauseAnswer = Continue
"""The answer a `Pause` accepts."""
ChildAnswer = ChildFinished
"""The answer a `Child` accepts (given by the runtime, never by a person)."""


@dataclass(frozen=True, slots=True)
class PermissionDecision:
    """An answer that fits a permission request."""

    target: ToolPermission
    answer: PermissionAnswer


@dataclass(frozen=True, slots=True)
class InputDecision:
    """An answer that fits a typed-input request."""

    target: RemoteInput
    answer: InputAnswer


@dataclass(frozen=True, slots=True)
class UncertainDecision:
    """An answer that fits an uncertain call."""

    target: Uncertain
    answer: UncertainAnswer


@dataclass(frozen=True, slots=True)
class PauseDecision:
    """An answer that fits a pause."""

    target: Pause
    answer: PauseAnswer


@dataclass(frozen=True, slots=True)
class ChildDecision:
    """A child run's outcome, fitted to the `Child` ticket of its parent."""

    target: Child
    answer: ChildAnswer


Fitted = PermissionDecision | InputDecision | UncertainDecision | PauseDecision | ChildDecision
"""A target paired with an answer of its own answer type: what applying a decision
matches on, so an answer that does not fit its target cannot reach that code."""


def fit(target: AwaitTarget, answer: Answer) -> Fitted | None:
    """Pair `target` with `answer` when the answer is one the target accepts, else None."""
    match target:
        case ToolPermission():
            match answer:
                case Allow() | Deny():
                    return PermissionDecision(target, answer)
                case _:
                    return None
        case RemoteInput():
            match answer:
                case InputData() | Deny():
                    return InputDecision(target, answer)
                case _:
                    return None
        case Uncertain():
            match answer:
                case Resolve() | Retry() | Abort():
                    return UncertainDecision(target, answer)
                case _:
                    return None
        case Pause():
            match answer:
                case Continue():
                    return PauseDecision(target, answer)
                case _:
                    return None
        case Child():
            match answer:
                case ChildFinished():
                    return ChildDecision(target, answer)
                case _:
                    return None
        case _:
            assert_never(target)


def kinds_accepted(target: AwaitTarget) -> frozenset[AnswerKind]:
    """The kinds of answer a person may give `target` (none for a `Child`: its run's end
    settles it)."""
    match target:
        case ToolPermission():
            return frozenset({"allow", "deny"})
        case RemoteInput():
            return frozenset({"input", "deny"})
        case Uncertain():
            return frozenset({"resolve", "retry", "abort"})
        case Pause():
            return frozenset({"continue"})
        case Child():
            return frozenset()
        case _:
            assert_never(target)


def _misfit(kind: AnswerKind, ticket: ResumeTicket) -> str:
    target = ticket.target
    match target:
        case Child():
            return (
                f"ticket {ticket.ticket_id} waits on sub-agent run {target.child_run_id} "
                f"({target.agent}); it continues when that run ends: decide that run's "
                "tickets instead"
            )
        case ToolPermission() | RemoteInput() | Uncertain() | Pause():
            return f"a {kind!r} answer does not fit a {target.kind!r} ticket"
        case _:
            assert_never(target)


def answer_fits(target: AwaitTarget, answer: Answer) -> bool:
    """Whether `answer` is one of the answers `target` accepts."""
    return fit(target, answer) is not None


def check_decidable(
    ticket: ResumeTicket | None,
    *,
    ticket_id: str,
    correlation: str,
    actor: Actor,
    at: datetime,
    kind: AnswerKind,
    agent_version: str | None,
    catalog_fingerprint: str | None,
    run_id: str | None = None,
    thread_id: str | None = None,
) -> ResumeTicket:
    """Check that `actor` may now answer `ticket` with an answer of `kind`.

    Everything `validate_resume` checks except the answer's content, in the same order:
    so a button can learn whether its form may open before anything is typed.

    Args:
        ticket: The committed ticket, or None if none exists.
        ticket_id: The id the click or request named.
        correlation: The token it carried.
        actor: Who answers.
        at: When the answer was given.
        kind: The kind of answer.
        agent_version: Version of the ticket's agent as loaded now (None: not loaded).
        catalog_fingerprint: Fingerprint of its tool catalog as loaded now.
        run_id: The run the command names (defaults to the ticket's).
        thread_id: The thread the command names (defaults to the ticket's).

    Returns:
        The ticket, which is open.

    Raises:
        NotAwaiting: No open ticket, or the correlation or identities do not match.
        Expired: The ticket expired, or its deadline passed before `at`.
        Unauthorized: The actor may not decide.
        ResolutionError: An answer of `kind` does not fit the target.
        StaleTicket: The agent or its catalog changed since the run parked.
    """
    if ticket is None:
        raise NotAwaiting(f"no ticket {ticket_id!r} is awaiting a decision")
    if ticket.status is TicketStatus.EXPIRED:
        raise Expired(f"ticket {ticket.ticket_id} expired")
    if ticket.status is not TicketStatus.OPEN:
        raise NotAwaiting(f"ticket {ticket.ticket_id} was already {ticket.status}")
    if not hmac.compare_digest(
        correlation.encode("utf-8", "surrogatepass"), ticket.correlation.encode()
    ):
        raise NotAwaiting(f"ticket {ticket.ticket_id}: correlation token does not match")
    if (run_id is not None and run_id != ticket.run_id) or (
        thread_id is not None and thread_id != ticket.thread_id
    ):
        raise NotAwaiting(f"ticket {ticket.ticket_id} belongs to another run or thread")
    # Who may decide comes before what the answer looks like, so someone who may not
    # decide learns nothing about what the ticket waits for.
    if not ticket.may_decide(actor):
        raise Unauthorized(
            f"{actor.id} may not decide ticket {ticket.ticket_id}; "
            f"who may: {ticket.who_may_decide()}"
        )
    if not ticket.decidable_here(actor):
        raise Unauthorized(ticket.step_up_refusal(actor))
    if kind not in kinds_accepted(ticket.target):
        raise ResolutionError(_misfit(kind, ticket))
    if ticket.deadline is not None and at >= ticket.deadline:
        raise Expired(
            f"ticket {ticket.ticket_id} passed its deadline {ticket.deadline.isoformat()}"
        )
    if agent_version is None or agent_version == STAND_IN_VERSION != ticket.agent_version:
        raise StaleTicket(f"agent {ticket.agent!r} is not loaded any more")
    if agent_version != ticket.agent_version or catalog_fingerprint != ticket.catalog_fingerprint:
        raise StaleTicket(
            f"agent {ticket.agent!r} changed since ticket {ticket.ticket_id} was opened"
        )
    return ticket


def validate_resume(
    command: ResumeCommand,
    ticket: ResumeTicket | None,
    *,
    agent_version: str | None,
    catalog_fingerprint: str | None,
) -> None:
    """Check a resume command against the committed ticket; raise if it must be refused.

    This is the side-effect boundary: nothing has changed when it raises.

    Args:
        command: The decision to check.
        ticket: The committed ticket with ``command.ticket_id``, or None if none exists.
        agent_version: Version of the agent as loaded now (None if it is not loaded).
        catalog_fingerprint: Fingerprint of the agent's tool catalog as loaded now.

    Raises:
        NotAwaiting: No open ticket, or the correlation or identities do not match.
        Expired: The ticket expired, or its deadline passed before ``command.at``.
        Unauthorized: The actor may not decide.
        ResolutionError: The answer does not fit the target.
        StaleTicket: The agent or its catalog changed since the run parked.
        InvalidAnswer: Typed input does not match the requested schema.
    """
    checked = check_decidable(
        ticket,
        ticket_id=command.ticket_id,
        correlation=command.correlation,
        actor=command.actor,
        at=command.at,
        kind=command.answer.kind,
        agent_version=agent_version,
        catalog_fingerprint=catalog_fingerprint,
        run_id=command.run_id,
        thread_id=command.thread_id,
    )
    _check_finite(command.answer)
    match fit(checked.target, command.answer):
        case InputDecision(target=target, answer=InputData(data=data)):
            check_input(target.schema_, data)
        case PermissionDecision() | InputDecision() | UncertainDecision() | PauseDecision():
            pass
        case ChildDecision():
            # `check_decidable` refuses every answer to a child ticket; only the runtime
            # settles it, outside this path.
            raise ResolutionError(_misfit(command.answer.kind, checked))
        case None:
            raise ResolutionError(
                f"a {command.answer.kind!r} answer does not fit a {checked.target.kind!r} ticket"
            )
        case _ as unexpected:
            assert_never(unexpected)


def _check_finite(answer: Answer) -> None:
    # NaN passes every numeric rule (nan > 1000 is false); JSON edges refuse it when
    # parsing, this refuses it from any other caller.
    for name, value in answer.model_dump(mode="python", exclude={"kind"}).items():
        where = non_finite_path(value)
        if where is not None:
            path = "" if where == "(root)" else where
            message = "numbers must be finite (not NaN or Infinity)"
            raise InvalidAnswer(
                f"{name}{'/' + path if path else ''}: {message}",
                [{"path": path, "message": message}],
            )


def check_input(schema: dict[str, Any], data: dict[str, Any]) -> None:
    """Raise `InvalidAnswer` listing every way `data` fails `schema`."""
    validator = jsonschema.Draft202012Validator(schema)
    problems = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if problems:
        errors = [
            {"path": "/".join(str(p) for p in e.absolute_path), "message": e.message}
            for e in problems
        ]
        summary = "; ".join(f"{e['path'] or '(root)'}: {e['message']}" for e in errors)
        raise InvalidAnswer(f"input does not match the requested form: {summary}", errors)
