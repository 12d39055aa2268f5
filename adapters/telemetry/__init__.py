"""OpenTelemetry traces: the runtime's tracing port on the OpenTelemetry SDK.

Tracing is off unless the standard ``OTEL_*`` variables ask for it
(`tracing_configured`); then `start_from_env` builds a tracer provider exporting over
OTLP/HTTP (or to the console) and `adapters.telemetry.otel.OtelTracer` implements
`runtime.edges.Tracer` on it. This top level imports no OpenTelemetry module, so nothing
of it is loaded, nor costs anything, while tracing is off. See ``docs/tracing.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from adapters.telemetry.config import EXTRA_MISSING, tracing_configured
from runtime import ConfigurationError

if TYPE_CHECKING:
    from adapters.telemetry.otel import Telemetry


def start_from_env(env: Mapping[str, str] | None = None) -> Telemetry | None:
    """Start tracing as the ``OTEL_*`` variables say; None when they leave it off.

    Raises:
        ConfigurationError: Tracing is asked for but the ``otel`` extra is not
            installed, or names an exporter or protocol signoff does not ship.
    """
    setting = tracing_configured(env)
    if setting is None:
        return None
    try:
        from adapters.telemetry.otel import start_telemetry
    except ImportError as exc:
        raise ConfigurationError(EXTRA_MISSING.format(setting=setting)) from exc
    return start_telemetry(env)


__all__ = ["EXTRA_MISSING", "start_from_env", "tracing_configured"]
