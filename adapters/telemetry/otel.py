"""The tracing port on the OpenTelemetry SDK: the tracer, its set-up from ``OTEL_*``, the
HTTP server middleware, traced chat deliveries and the ids log lines carry.

Imported only when tracing is on (`adapters.telemetry.tracing_configured`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from runtime import ConfigurationError
from runtime.edges import Attributes, AttributeValue, Carrier, Delivery, Notification, Span
from runtime.edges import SpanKind as PortSpanKind

log = logging.getLogger("signoff.telemetry")

INSTRUMENTATION = "signoff"
DEFAULT_SERVICE_NAME = "signoff"

# Stored and sent contexts are always W3C trace context, whatever OTEL_PROPAGATORS says:
# a run's stored context must read the same on every replica.
_W3C = TraceContextTextMapPropagator()

_KINDS: dict[PortSpanKind, SpanKind] = {
    "internal": SpanKind.INTERNAL,
    "server": SpanKind.SERVER,
    "client": SpanKind.CLIENT,
    "producer": SpanKind.PRODUCER,
    "consumer": SpanKind.CONSUMER,
}


def _clean(attributes: Attributes | None) -> dict[str, AttributeValue]:
    if not attributes:
        return {}
    return {key: value for key, value in attributes.items() if value is not None}


def _nanos(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _links(carriers: Sequence[Carrier]) -> list[Link]:
    found = []
    for carrier in carriers:
        context = trace.get_current_span(_W3C.extract(carrier)).get_span_context()
        if context.is_valid:
            found.append(Link(context))
    return found


class OtelSpan:
    """The port's `Span` on an OpenTelemetry span."""

    __slots__ = ("_span",)

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set the attribute `key` (a None value is left out)."""
        if value is not None:
            self._span.set_attribute(key, value)

    def fail(self, description: str) -> None:
        """Mark the span as failed, saying why."""
        self._span.set_status(Status(StatusCode.ERROR, description))


class OtelTracer:
    """The runtime's `Tracer` on an OpenTelemetry tracer provider."""

    def __init__(self, provider: trace.TracerProvider) -> None:
        """Trace into `provider` (its spans go where its processors send them)."""
        self._tracer = provider.get_tracer(INSTRUMENTATION)

    def span(
        self,
        name: str,
        *,
        kind: PortSpanKind = "internal",
        attributes: Attributes | None = None,
        parent: Carrier | None = None,
        links: Sequence[Carrier] = (),
    ) -> AbstractContextManager[Span]:
        """Open a span, current inside the ``with`` block (see `runtime.edges.Tracer`)."""
        return self._span(name, kind, attributes, parent, links)

    @contextmanager
    def _span(
        self,
        name: str,
        kind: PortSpanKind,
        attributes: Attributes | None,
        parent: Carrier | None,
        links: Sequence[Carrier],
    ) -> Iterator[Span]:
        context = _W3C.extract(parent) if parent else None
        with self._tracer.start_as_current_span(
            name,
            context=context,
            kind=_KINDS[kind],
            attributes=_clean(attributes),
            links=_links(links),
        ) as span:
            yield OtelSpan(span)

    def carrier(self) -> Carrier | None:
        """The current span's context as a W3C carrier (None: no span is current)."""
        if not trace.get_current_span().get_span_context().is_valid:
            return None
        carrier: Carrier = {}
        _W3C.inject(carrier)
        return carrier

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
        """Report a span that has already happened (clocks of two replicas may differ
        a little: it never ends before it starts)."""
        context = _W3C.extract(parent) if parent else None
        begin = _nanos(start)
        span = self._tracer.start_span(
            name,
            context=context,
            attributes=_clean(attributes),
            links=_links(links),
            start_time=begin,
        )
        span.end(end_time=max(_nanos(end), begin))


def current_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids in hex (None: no span is current)."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


@dataclass
class Telemetry:
    """Tracing as started for this process: the provider and the port on it."""

    provider: TracerProvider
    tracer: OtelTracer

    def shutdown(self) -> None:
        """Send what is still buffered and stop (blocks up to the exporter's timeout)."""
        self.provider.shutdown()

    @staticmethod
    def ids() -> tuple[str, str] | None:
        """The current span's trace and span ids (`current_ids`), for log lines."""
        return current_ids()

    def middleware(self) -> Middleware:
        """The HTTP server middleware (`http_middleware`)."""
        return http_middleware(self.tracer)

    def notifiers(self, notifiers: Mapping[str, Any], trace_of: TraceOf) -> dict[str, Any]:
        """`notifiers` with Slack's and Discord's deliveries traced (`traced_notifiers`)."""
        return traced_notifiers(notifiers, self.tracer, trace_of)


def _traces_endpoint(env: Mapping[str, str]) -> str | None:
    """Where OTLP/HTTP traces go, as the OTLP exporter's specification reads the two
    variables (None: the exporter's default, ``http://localhost:4318/v1/traces``)."""
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return f"{base.rstrip('/')}/v1/traces" if base else None


def _exporters(env: Mapping[str, str]) -> list[SpanExporter]:
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    exporters: list[SpanExporter] = []
    for name in names:
        if name in ("", "none"):
            continue
        if name == "otlp":
            protocol = (
                env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            ).strip()
            if protocol != "http/protobuf":
                raise ConfigurationError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported; signoff "
                    "exports traces over OTLP/HTTP (http/protobuf)"
                )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter(endpoint=_traces_endpoint(env)))
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        else:
            raise ConfigurationError(
                f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (otlp, console or none)"
            )
    return exporters


def start_telemetry(
    env: Mapping[str, str] | None = None,
    *,
    processors: Sequence[SpanProcessor] = (),
    set_global: bool = True,
) -> Telemetry:
    """A tracer provider configured by the ``OTEL_*`` variables, and the port on it.

    The service is named by ``OTEL_SERVICE_NAME`` (default ``signoff``); resource
    attributes, the sampler and the batch processor's limits come from their own
    standard variables. The provider becomes OpenTelemetry's global one, so libraries
    with their own instrumentation (the MCP SDK's client requests) trace into it too.

    Args:
        env: The environment (default: the process's).
        processors: Span processors used instead of the exporters the environment names
            (tests, benchmarks).
        set_global: Make the provider OpenTelemetry's global one.

    Raises:
        ConfigurationError: An exporter or protocol signoff does not ship.
    """
    env = os.environ if env is None else env
    service = env.get("OTEL_SERVICE_NAME", "").strip() or DEFAULT_SERVICE_NAME
    # Resource.create adds OTEL_RESOURCE_ATTRIBUTES' attributes (the service name wins).
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    if processors:
        for processor in processors:
            provider.add_span_processor(processor)
    else:
        for exporter in _exporters(env):
            provider.add_span_processor(BatchSpanProcessor(exporter))
    if set_global:
        trace.set_tracer_provider(provider)
    return Telemetry(provider=provider, tracer=OtelTracer(provider))


# -- HTTP server ----------------------------------------------------------------------


def _route(request: web.Request) -> str | None:
    info = request.match_info
    resource = info.route.resource if info.route is not None else None
    return resource.canonical if resource is not None else None


def http_middleware(tracer: OtelTracer) -> Middleware:
    """An aiohttp middleware that opens a server span per request.

    The span continues a W3C ``traceparent`` the request carries. It records the
    method, the route's template (never the path itself, which may hold a code or an
    id) and the response status; a 5xx marks it failed.
    """

    @web.middleware
    async def trace_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
        carrier = {
            key: value
            for key in ("traceparent", "tracestate")
            if (value := request.headers.get(key)) is not None
        }
        route = _route(request)
        name = f"{request.method} {route}" if route else request.method
        attributes = {"http.request.method": request.method, "http.route": route}
        answered: web.HTTPException | None = None
        with tracer.span(
            name, kind="server", attributes=attributes, parent=carrier or None
        ) as span:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                # An answer (404, 409, 503...), raised: only a 5xx is the span's failure.
                answered = exc
                status, reason = exc.status, exc.reason
            else:
                status, reason = response.status, response.reason
            span.set("http.response.status_code", status)
            if status >= 500:
                span.fail(reason)
        if answered is not None:
            raise answered
        return response

    return trace_requests


# -- deliveries -------------------------------------------------------------------------

TraceOf = Callable[[str], Awaitable[Carrier | None]]
"""The stored trace context of a run, by run id."""


class TracedNotifier:
    """A platform notifier whose deliveries are client spans in their run's trace."""

    def __init__(self, inner: Any, platform: str, tracer: OtelTracer, trace_of: TraceOf) -> None:
        """Trace `inner`'s deliveries to `platform`, in the trace `trace_of` finds."""
        self.inner = inner
        self._platform = platform
        self._tracer = tracer
        self._trace_of = trace_of

    def needs_ticket(self, note: Notification) -> bool:
        """What `inner` says, or True when it does not say."""
        says = getattr(self.inner, "needs_ticket", None)
        return bool(says(note)) if callable(says) else True

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        """Deliver through `inner` inside a ``deliver <platform>`` span."""
        run_id = getattr(note, "run_id", None)
        parent = await self._trace_of(run_id) if isinstance(run_id, str) else None
        attributes: dict[str, AttributeValue | None] = {
            "signoff.platform": self._platform,
            "signoff.notification": note.kind,
            "signoff.outbox.id": delivery.outbox_id,
            "signoff.delivery.attempt": delivery.attempt,
            "signoff.run.id": run_id,
            "signoff.ticket.id": getattr(note, "ticket_id", None),
        }
        with self._tracer.span(
            f"deliver {self._platform}", kind="client", attributes=attributes, parent=parent
        ) as span:
            try:
                reference = await self.inner.deliver(note, delivery)
            except Exception as exc:
                span.fail(f"{type(exc).__name__}: {exc}")
                raise
            return reference  # type: ignore[no-any-return]


def traced_notifiers(
    notifiers: Mapping[str, Any], tracer: OtelTracer, trace_of: TraceOf
) -> dict[str, Any]:
    """`notifiers` with those of chat platforms (Slack, Discord) traced."""
    return {
        platform: TracedNotifier(notifier, platform, tracer, trace_of)
        if platform in ("slack", "discord")
        else notifier
        for platform, notifier in notifiers.items()
    }


__all__ = [
    "DEFAULT_SERVICE_NAME",
    "OtelSpan",
    "OtelTracer",
    "Telemetry",
    "TracedNotifier",
    "current_ids",
    "http_middleware",
    "start_telemetry",
    "traced_notifiers",
]
