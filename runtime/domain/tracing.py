"""Tracing: the port the runtime reports its spans through, and the no-op default.

The runtime knows no tracing library. It opens spans through a `Tracer` (an adapter
implements it on OpenTelemetry, `adapters.telemetry`) and keeps the context of a run's
trace as a text carrier (W3C ``traceparent`` and ``tracestate``) stored with the run, so
a run resumed hours later, on another process, continues the trace it started in.

Spans the runtime opens (names and attributes are listed in ``docs/tracing.md``):

- ``start_run <agent>`` when a run is created: its context is the run's trace context;
- ``invoke_agent <agent>`` for each stretch a worker drives a run (claim to park or end),
  a child of the run's trace context;
- ``agent_turn <agent>``, ``chat <model>`` and ``execute_tool <tool>`` inside it;
- ``await_decision <tool>`` for a ticket's wait: recorded when the decision commits,
  from the ticket's opening to the decision, in the run's trace, linked to the span the
  decision came from (a console or API request, or the span a stored chat click arrived
  in, whose context is kept with the click);
- ``click <platform>`` for a chat click that reaches no traced request (a gateway's or a
  websocket's event).

`NO_TRACER` does nothing and costs next to nothing: it is the default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Literal, Protocol

Carrier = dict[str, str]
"""A span context as text: ``{"traceparent": ..., "tracestate": ...}`` (W3C)."""

AttributeValue = str | bool | int | float
"""What a span attribute may hold."""

Attributes = Mapping[str, AttributeValue | None]
"""Span attributes; a None value is left out."""

SpanKind = Literal["internal", "server", "client", "producer", "consumer"]
"""The OpenTelemetry span kinds."""


class Span(Protocol):
    """An open span: attributes may be added to it until it ends."""

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set the attribute `key` (a None value is left out)."""
        ...

    def fail(self, description: str) -> None:
        """Mark the span as failed, saying why."""
        ...


class Tracer(Protocol):
    """Where the runtime reports spans."""

    def span(
        self,
        name: str,
        *,
        kind: SpanKind = "internal",
        attributes: Attributes | None = None,
        parent: Carrier | None = None,
        links: Sequence[Carrier] = (),
    ) -> AbstractContextManager[Span]:
        """Open a span, current inside the ``with`` block.

        Args:
            name: The span's name.
            kind: Its kind.
            attributes: Its first attributes.
            parent: The context it continues (None: the current span, if any).
            links: Contexts it is linked to (e.g. the request that made a run ready).
        """
        ...

    def carrier(self) -> Carrier | None:
        """The current span's context as a carrier (None: no span is current)."""
        ...

    def finished(
        self,
        name: str,
        *,
        start: datetime,
        end: datetime,
        parent: Carrier | None,
        attributes: Attributes | None = None,
        links: Sequence[Carrier] = (),
    ) -> None:
        """Report a span that has already happened, from `start` to `end`."""
        ...


class _NoSpan:
    """The span of `NoTracer`: records nothing."""

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Record nothing."""

    def fail(self, description: str) -> None:
        """Record nothing."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


class NoTracer:
    """A tracer that records nothing (the default when tracing is off)."""

    def span(
        self,
        name: str,
        *,
        kind: SpanKind = "internal",
        attributes: Attributes | None = None,
        parent: Carrier | None = None,
        links: Sequence[Carrier] = (),
    ) -> AbstractContextManager[Span]:
        """A span that records nothing."""
        return _NO_SPAN

    def carrier(self) -> Carrier | None:
        """None: there is never a current span."""
        return None

    def finished(
        self,
        name: str,
        *,
        start: datetime,
        end: datetime,
        parent: Carrier | None,
        attributes: Attributes | None = None,
        links: Sequence[Carrier] = (),
    ) -> None:
        """Record nothing."""


NO_TRACER = NoTracer()
"""The shared tracer that records nothing."""


def valid_carrier(value: object) -> Carrier | None:
    """`value` as a carrier when it is one (a mapping of text to text with a
    ``traceparent``), else None: a stored context is read defensively."""
    if not isinstance(value, Mapping):
        return None
    carrier = {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
    return carrier if carrier.get("traceparent") else None
