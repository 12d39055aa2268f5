"""The bodies of the JSON API's run, ticket, grant and decision routes, as pydantic models.

They describe what `adapters.web.api` reads and answers today, field for field, for the
OpenAPI document (`adapters.web.openapi`); the routes build their JSON themselves. Answer
models forbid other fields, so a test validating real answers against the document
notices a field the document does not name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RunStatusName = Literal["queued", "running", "awaiting", "paused", "done", "failed", "cancelled"]
GrantScopeName = Literal["run", "thread"]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Error(_Answer):
    """Why a request was refused."""

    error: str = Field(description="A stable code: bad_request, unknown_ticket, expired ...")
    message: str
    errors: list[dict[str, Any]] = Field(
        default_factory=list, description="Field problems ({path, message}), when any."
    )


class ToolInfo(_Answer):
    """A tool of an agent."""

    name: str
    description: str


class AgentInfo(_Answer):
    """A loaded agent."""

    name: str
    description: str
    version: str
    tools: list[ToolInfo]


class AgentList(_Answer):
    """``GET /api/agents``."""

    agents: list[AgentInfo]


class Counters(_Answer):
    """A run's own counters (they only grow across resumes)."""

    turns: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    usage_incomplete: bool


class ChildCounters(_Answer):
    """A run's sub-agents' counters added up."""

    runs: int
    turns: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    usage_incomplete: bool


class ChainLink(_Answer):
    """A run above this one in its delegation tree."""

    run_id: str
    agent: str


class ChildLink(_Answer):
    """A sub-agent's run."""

    run_id: str
    agent: str
    task_key: str | None
    status: RunStatusName | None


class Pending(_Answer):
    """One thing a parked run waits on: the ticket, the exact call, who may decide."""

    ticket_id: str
    kind: Literal["approval", "input", "uncertain"]
    run_id: str
    thread_id: str
    agent: str
    tool: str
    call_id: str
    arguments: dict[str, Any]
    execution_key: str
    attempts: int
    prompt: str | None
    schema_: dict[str, Any] | None = Field(alias="schema")
    editable: list[str]
    requester: str | None
    approvers: list[str]
    four_eyes: bool
    who_may_decide: str
    deadline: datetime | None
    created_at: datetime
    grants: list[GrantScopeName]
    chain: list[str]


class Run(_Answer):
    """A run as it stands, with its counters and what it waits on."""

    run_id: str
    thread_id: str
    agent: str
    status: RunStatusName
    text: str | None
    error: str | None
    requester: str | None
    counters: Counters
    pending: list[Pending]
    parent_run_id: str | None
    task_key: str | None
    depth: int
    chain: list[ChainLink]
    children: list[ChildLink]
    children_counters: ChildCounters


class StartedRun(Run):
    """``POST /api/runs``: the run just queued, and where to read it."""

    url: str


class RunSummary(_Answer):
    """A run in a listing."""

    run_id: str
    thread_id: str
    agent: str
    status: RunStatusName
    requester: str | None
    input: str | None
    text: str | None
    error: str | None
    turns: int
    created_at: datetime | None
    updated_at: datetime | None


class RunList(_Answer):
    """``GET /api/runs``: newest first."""

    runs: list[RunSummary]
    next_cursor: str | None


class StartRun(BaseModel):
    """``POST /api/runs``: start a run of a loaded agent."""

    agent: str = Field(min_length=1)
    input: str = Field(min_length=1, description="The message to the agent.")
    thread_id: str | None = Field(default=None, description="Continue this thread.")


class RunEvents(_Answer):
    """``GET /api/runs/{run_id}/events``: the run's flight recorder."""

    run_id: str
    events: list[dict[str, Any]]


class ControlBody(BaseModel):
    """``POST /api/runs/{run_id}/cancel|pause|resume``."""

    reason: str | None = Field(default=None, description="Why (cancel only).")


class TicketList(_Answer):
    """``GET /api/tickets``: the open tickets the caller may see."""

    tickets: list[Pending]
    next_cursor: str | None


class GrantRequestBody(BaseModel):
    """A standing grant given with an allow."""

    scope: GrantScopeName = "run"
    hours: float | None = Field(default=None, gt=0, le=720)
    args: Literal["same"] | dict[str, Any] | None = Field(
        default=None, description='"same", or tests on arguments ({"amount": {"le": 300}}).'
    )


class AllowDecision(BaseModel):
    """Allow the call, optionally with changed arguments and a standing grant."""

    decision: Literal["allow"]
    args: dict[str, Any] | None = Field(default=None, description="Arguments to change.")
    grant: GrantRequestBody | None = None


class DenyDecision(BaseModel):
    """Deny the call."""

    decision: Literal["deny"]
    reason: str | None = None


class InputAnswer(BaseModel):
    """Answer a request for typed input (validated against its schema)."""

    answer: dict[str, Any]


class ResultResolution(BaseModel):
    """Resolve an uncertain call with its verified result."""

    resolution: Literal["result"]
    result: Any


class RetryResolution(BaseModel):
    """Accept a retry of an uncertain call."""

    resolution: Literal["retry"]


class AbortResolution(BaseModel):
    """Abort an uncertain call."""

    resolution: Literal["abort"]
    reason: str | None = None


TicketDecision = (
    AllowDecision
    | DenyDecision
    | InputAnswer
    | ResultResolution
    | RetryResolution
    | AbortResolution
)
"""``POST /api/tickets/{ticket_id}/decision``: exactly one of ``decision``, ``answer``
or ``resolution``."""


class Grant(_Answer):
    """A standing grant: what it covers, who gave it, whether it still applies."""

    grant_id: str
    state: Literal["active", "revoked", "expired", "ended"]
    agent: str
    tool: str
    scope: GrantScopeName
    run_id: str
    thread_id: str
    requester: str | None
    args: dict[str, Any] | None
    covers: str
    granted_by: str
    granted_by_name: str | None
    platform: str
    ticket_id: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None


class Decided(_Answer):
    """``POST /api/tickets/{ticket_id}/decision``: the decision and the run after it."""

    ticket_id: str
    decision: str
    run: Run
    grant: Grant | None = Field(default=None, description="The grant given, with a grant.")


class GrantList(_Answer):
    """``GET /api/grants``."""

    grants: list[Grant]


class RunGrants(_Answer):
    """``GET /api/runs/{run_id}/grants``."""

    run_id: str
    grants: list[Grant]


class BatchBody(BaseModel):
    """``POST /api/decisions``: several decisions, each applied (or refused) on its own."""

    decisions: list[dict[str, Any]] = Field(
        min_length=1,
        description=(
            'Each {"ticket_id", ...} with one decision as POST '
            "/api/tickets/{ticket_id}/decision takes it."
        ),
    )


class BatchResult(_Answer):
    """One decision of a batch: applied (with its run) or refused (why)."""

    ticket_id: str | None
    decision: str | None = None
    status: int
    applied: bool
    run_id: str | None = None
    run_status: RunStatusName | None = None
    error: str | None = None
    message: str | None = None
    errors: list[dict[str, Any]] | None = None


class BatchAnswer(_Answer):
    """``POST /api/decisions``: one result per decision, in order."""

    results: list[BatchResult]
    applied: int
    refused: int


class JWK(_Answer):
    """A public key of decision tokens (RFC 8037 ``OKP``)."""

    kty: Literal["OKP"]
    crv: Literal["Ed25519"]
    x: str
    kid: str
    alg: Literal["EdDSA"]
    use: Literal["sig"]


class JWKS(_Answer):
    """``GET /.well-known/jwks.json``."""

    keys: list[JWK]
