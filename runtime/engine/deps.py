"""What the engine and the services share: the store, the clock, the ids, the agents and
their models, this worker's lease, the crash checkpoint and the local worker's slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.domain.agent import Agent
from runtime.domain.clock import Clock, IdSource
from runtime.domain.errors import ConfigurationError
from runtime.domain.identity import IdentityRules
from runtime.domain.model import Model
from runtime.domain.tracing import NO_TRACER, Tracer
from runtime.engine.handoff import Slot, Slots
from runtime.store.base import Store
from runtime.store.records import CallRecord


class Checkpoint(Protocol):
    """Called at named points of execution (crash tests kill the process there).

    Points: ``dispatch_committed``, ``tool_returned`` (before its result is committed;
    with its ``outcome`` and ``seconds``), ``result_committed``, ``call_uncertain``,
    ``model_answered`` (with ``seconds`` and tokens), ``model_failed`` (with ``kind``),
    ``model_call_committed``, ``decision_committed`` (with ``latency_seconds``, ``edge``
    and ``ticket_kind``), ``ticket_expired`` (with ``action``), ``run_recovered``,
    ``run_driven`` (with the ``status`` it was left in) and, from the outbox,
    ``notification_delivered`` and ``notification_failed`` (with ``outcome``).
    """

    def __call__(self, point: str, info: dict[str, Any]) -> None:
        """Observe a point."""
        ...


@dataclass(frozen=True, slots=True)
class ResultMiddlewareInput:
    """What result middleware sees: the recorded raw result of one settled call."""

    call: CallRecord
    content: str


ResultMiddleware = Any  # Callable[[ResultMiddlewareInput], str]


@dataclass
class Deps:
    """What the engine and the decision path share."""

    store: Store
    clock: Clock
    ids: IdSource
    agents: dict[str, Agent]
    worker_id: str
    lease_seconds: float
    checkpoint: Checkpoint | None = None
    result_middleware: list[ResultMiddleware] = field(default_factory=list)
    models: dict[str, Model] = field(default_factory=dict)
    """The resolved model of each registered agent, by agent name."""
    slots: Slots | None = None
    """A local worker that takes runs claimed in the commit that made them ready."""
    identity: IdentityRules = field(default_factory=IdentityRules)
    """How people's ids are treated (`runtime.domain.identity`)."""
    tracer: Tracer = NO_TRACER
    """Where spans go (`runtime.domain.tracing`; by default nowhere)."""

    def reserve_slot(self) -> Slot | None:
        """A free place in the local worker, if one is attached and has one."""
        return self.slots.reserve() if self.slots is not None else None

    def model_of(self, agent: Agent) -> Model:
        """The model `agent` runs on (resolved when it was registered)."""
        model = self.models.get(agent.name)
        if model is not None:
            return model
        if isinstance(agent.model, str):
            raise ConfigurationError(
                f"agent {agent.name!r}: its model {agent.model!r} was never resolved"
            )
        return agent.model

    def reach(self, point: str, **info: Any) -> None:
        """Report a named execution point."""
        if self.checkpoint is not None:
            self.checkpoint(point, info)


__all__ = [
    "NO_TRACER",
    "Checkpoint",
    "Deps",
    "ResultMiddleware",
    "ResultMiddlewareInput",
    "Tracer",
]
